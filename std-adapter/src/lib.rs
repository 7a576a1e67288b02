//! stormguard-std (in progress).
