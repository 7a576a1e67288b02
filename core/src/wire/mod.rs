//! What a resilient client reads from and writes to the wire, sans I/O: HTTP header values
//! ([`http`]), gRPC's timeout, status and pushback ([`grpc`]), and the quota a server publishes
//! in its response headers ([`quota`]). Every parser takes the bytes a peer chose, allocates
//! nothing, never panics, and returns `None` for anything it cannot read whole, so a malformed or
//! hostile value is ignored rather than half-believed.

pub mod grpc;
pub mod http;
pub mod quota;

/// Optional whitespace around a value: spaces and tabs only (RFC 9110's OWS).
fn trim_ows(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let rest = value.get(start..).unwrap_or(&[]);
    let end = rest
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |i| i.saturating_add(1));
    rest.get(..end).unwrap_or(&[])
}
