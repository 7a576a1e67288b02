//! The adapter's overhead (written in a later step).
fn main() {}
