//! A client behind the tower layer (written in a later step).
fn main() {}
