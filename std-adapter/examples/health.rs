//! The health endpoint (written in a later step).
fn main() {}
