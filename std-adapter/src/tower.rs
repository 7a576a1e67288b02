//! tower (in progress).
