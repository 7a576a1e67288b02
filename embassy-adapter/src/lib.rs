//! stormguard-embassy (in progress).
