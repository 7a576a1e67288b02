//! stormguard-tests (in progress).
