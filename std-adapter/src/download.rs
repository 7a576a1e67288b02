//! Resumable downloads over reqwest (feature `reqwest`): [`download`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_RANGE, ETAG, IF_RANGE, RANGE};
use http::{HeaderValue, StatusCode};
use http_body::Body as _;
use stormguard_core::{Duration, Outcome, SettingsError};

use crate::classify::{http_outcome, retry_after};
use crate::clock::Clock;
use crate::events::Listener;
use crate::policy::{CallStream, Policy};

/// Why a download (or one connection of it) failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DownloadError {
    /// The request failed: no connection, or the body broke mid-way.
    Request(reqwest::Error),
    /// The server answered with a status that is no success.
    Status {
        /// The status.
        status: StatusCode,
        /// Its `Retry-After`, if it sent one that can be read.
        retry_after: Option<Duration>,
    },
    /// The resource changed since the download began: a restart asked for the rest of it
    /// with `If-Range` and got the whole new one (a `200`), or a range that starts elsewhere.
    Changed,
    /// The request cannot be sent again (its body is a stream), and a connection had to be
    /// made again (a retry before the first chunk, or a restart).
    NotResumable,
}

impl fmt::Display for DownloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownloadError::Request(e) => write!(f, "download failed: {e}"),
            DownloadError::Status { status, .. } => write!(f, "download answered {status}"),
            DownloadError::Changed => f.write_str("the resource changed during the download"),
            DownloadError::NotResumable => {
                f.write_str("the download's request cannot be sent again")
            }
        }
    }
}

impl std::error::Error for DownloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DownloadError::Request(e) => Some(e),
            _ => None,
        }
    }
}

/// How a download's failure counts: a broken request or body is transient, a status by the
/// HTTP rules ([`http_outcome`]: a `5xx` transient, a `429`, or a `503` with `Retry-After`,
/// throttled) except that any other status that is no success ends the download
/// ([`Outcome::Permanent`]), and so does a resource that changed or a request that cannot be
/// sent again.
///
/// ```
/// use stormguard_std::download::download_outcome;
/// use stormguard_std::{DownloadError, Duration, Outcome};
/// use http::StatusCode;
///
/// let busy = |retry_after| DownloadError::Status { status: StatusCode::SERVICE_UNAVAILABLE, retry_after };
/// assert_eq!(download_outcome(&busy(None)), Outcome::Transient);
/// let hint = Some(Duration::from_secs(3));
/// assert_eq!(download_outcome(&busy(hint)), Outcome::Throttled { retry_after: hint });
/// let gone = DownloadError::Status { status: StatusCode::NOT_FOUND, retry_after: None };
/// assert_eq!(download_outcome(&gone), Outcome::Permanent);
/// assert_eq!(download_outcome(&DownloadError::Changed), Outcome::Permanent);
/// ```
#[must_use]
pub fn download_outcome(error: &DownloadError) -> Outcome {
    match error {
        DownloadError::Request(_) => Outcome::Transient,
        DownloadError::Status {
            status,
            retry_after,
        } => match (http_outcome(*status, &http::HeaderMap::new()), retry_after) {
            (Outcome::Throttled { .. }, hint) => Outcome::Throttled { retry_after: *hint },
            // A 503 that says for how long is the server defending itself, as for a call.
            (Outcome::Transient, Some(hint)) if *status == StatusCode::SERVICE_UNAVAILABLE => {
                Outcome::Throttled {
                    retry_after: Some(*hint),
                }
            }
            (Outcome::Success, _) => Outcome::Permanent,
            (other, _) => other,
        },
        DownloadError::Changed | DownloadError::NotResumable => Outcome::Permanent,
    }
}

/// A response body read as a stream of chunks.
pub struct Chunks {
    body: Pin<Box<reqwest::Body>>,
}

impl Stream for Chunks {
    type Item = Result<Bytes, DownloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry no bytes of the resource.
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            return Poll::Ready(Some(Ok(data)));
                        }
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(DownloadError::Request(e))))
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl fmt::Debug for Chunks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunks").finish_non_exhaustive()
    }
}

/// One connection of a download being opened.
pub type Opening = Pin<Box<dyn Future<Output = Result<Chunks, DownloadError>> + Send>>;

/// Whether `tag` is a strong entity tag (`"..."`, not `W/"..."`).
fn is_strong(tag: &HeaderValue) -> bool {
    tag.as_bytes().first() == Some(&b'"')
}

/// The start of a `206`'s `Content-Range` (`bytes 1000-1999/2000`), or, for a `416`'s
/// (`bytes */2000`), the complete length.
fn range_start(range: Option<&HeaderValue>) -> Option<u64> {
    let rest = range?.to_str().ok()?.strip_prefix("bytes ")?;
    let first = rest.split(['-', '/']).next()?.trim();
    if first == "*" {
        return rest.rsplit('/').next()?.trim().parse().ok();
    }
    first.parse().ok()
}

/// What the first response said the resource is, for the restarts to resume against.
#[derive(Default)]
struct Validator {
    /// Its strong `ETag`, if it sent one with an unencoded body; `None`: no resume.
    etag: Mutex<Option<HeaderValue>>,
    /// Whether `etag` holds one: read for every chunk, so the checkpoint says at once
    /// whether a loss can be resumed from.
    strong: AtomicBool,
}

impl Validator {
    fn set(&self, tag: Option<HeaderValue>) {
        self.strong.store(tag.is_some(), Ordering::Release);
        *self.etag.lock().unwrap_or_else(PoisonError::into_inner) = tag;
    }

    fn get(&self) -> Option<HeaderValue> {
        self.etag
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The body of a `416` to a range starting at the resource's end: nothing was left to send.
fn nothing_left() -> Chunks {
    Chunks {
        body: Box::pin(reqwest::Body::from(Bytes::new())),
    }
}

/// Opens the connection that reads the resource of `request` (or, once it is spent, of a
/// copy of `template`) after byte `from` (from the start when `None`), keeping the first
/// response's strong `ETag` in `validator`.
fn open(
    client: &reqwest::Client,
    request: Option<reqwest::Request>,
    template: Option<&reqwest::Request>,
    validator: &Arc<Validator>,
    from: Option<u64>,
) -> Opening {
    let client = client.clone();
    let validator = Arc::clone(validator);
    let request = request.or_else(|| template.and_then(reqwest::Request::try_clone));
    Box::pin(async move {
        let mut request = request.ok_or(DownloadError::NotResumable)?;
        // Offsets count the bytes as sent: a body the client decodes on the way could not be
        // resumed at the offset of its decoded bytes.
        let headers = request.headers_mut();
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let mut tag = None;
        if let Some(offset) = from {
            tag = validator.get();
            let resume_against = tag.clone().ok_or(DownloadError::NotResumable)?;
            let range = HeaderValue::from_str(&format!("bytes={offset}-"))
                .map_err(|_| DownloadError::NotResumable)?;
            headers.insert(RANGE, range);
            headers.insert(IF_RANGE, resume_against);
        }
        let response = client
            .execute(request)
            .await
            .map_err(DownloadError::Request)?;
        let status = response.status();
        let got = response.headers();
        if let Some(offset) = from {
            let start = range_start(got.get(CONTENT_RANGE));
            match status {
                StatusCode::PARTIAL_CONTENT => {
                    // The range must start where the download stopped, of the same resource
                    // (a server that honours Range but not If-Range says so in its ETag).
                    let same = got.get(ETAG).is_none_or(|t| Some(t) == tag.as_ref());
                    if start != Some(offset) || !same {
                        return Err(DownloadError::Changed);
                    }
                }
                // The body broke after its last byte: nothing is left to read.
                StatusCode::RANGE_NOT_SATISFIABLE if start == Some(offset) => {
                    return Ok(nothing_left())
                }
                // The validator no longer matches: the whole new resource came back.
                s if s.is_success() => return Err(DownloadError::Changed),
                _ => {}
            }
        }
        if !status.is_success() {
            return Err(DownloadError::Status {
                status,
                retry_after: retry_after(got),
            });
        }
        if from.is_none() {
            let encoded = got
                .get(CONTENT_ENCODING)
                .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
            let strong = got.get(ETAG).filter(|t| is_strong(t) && !encoded);
            validator.set(strong.cloned());
        }
        Ok(Chunks {
            body: Box::pin(reqwest::Body::from(response)),
        })
    })
}

/// A resumable download: a [`CallStream`] of the resource's bytes.
pub type Download<'p, K, L, O, CP> = CallStream<
    'p,
    K,
    L,
    Bytes,
    DownloadError,
    Chunks,
    O,
    Option<u64>,
    CP,
    fn(&DownloadError) -> Outcome,
>;

/// Downloads `request`'s resource under `policy` as a stream of chunks, resuming a body that
/// breaks mid-way.
///
/// The request is a streaming call of the policy ([`Policy::call_stream_resumable`]): retried
/// until the first chunk arrives, the attempt timeout bounding that wait; after it the gap
/// between two chunks is bounded by the attempt timeout too, so a stalled body ends as a
/// timeout. When the body breaks or stalls, the download restarts from the last byte received
/// (up to 3 times by default) with `Range: bytes=N-` and `If-Range` set to the first
/// response's `ETag`, but only when that `ETag` is strong (a weak one, `W/"..."`, may differ
/// byte for byte): without one, the break ends the download as its own error, and no restart
/// is paid for. Every request asks for the body unencoded (`Accept-Encoding: identity`), since
/// an offset counts the bytes as sent; a first response encoded all the same is not resumed.
/// A server that sends the whole resource back (it changed), a range that starts elsewhere or
/// another `ETag` ends the download with [`DownloadError::Changed`]; a `416` to a range
/// starting at the resource's end means nothing was left, and the download ends complete.
/// Failures count by [`download_outcome`].
///
/// Refused for a hedged policy, as every streaming call is.
///
/// ```no_run
/// use futures_util::StreamExt;
/// use stormguard_std::{download, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::builder("mirror").build()?;
/// let client = reqwest::Client::new();
/// let request = client.get("http://127.0.0.1:8080/image.iso").build()?;
/// let mut body = download(&policy, client, request)?;
/// let mut received = 0;
/// while let Some(chunk) = body.next().await {
///     received += chunk?.len();
/// }
/// println!("{received} bytes, {} restarts", body.restarts());
/// # Ok(()) }
/// ```
#[allow(clippy::type_complexity)]
pub fn download<K, L>(
    policy: &Policy<K, L>,
    client: reqwest::Client,
    request: reqwest::Request,
) -> Result<
    Download<
        '_,
        K,
        L,
        impl FnMut(Option<Option<u64>>) -> Opening + Send + 'static,
        impl FnMut(&Bytes) -> Option<u64> + Send + 'static,
    >,
    SettingsError,
>
where
    K: Clock,
    L: Listener,
{
    let validator = Arc::new(Validator::default());
    let strong = Arc::clone(&validator);
    let mut received = 0u64;
    // The offset of the bytes received, when the download can resume from it.
    let checkpoint = move |chunk: &Bytes| {
        received = received.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        strong.strong.load(Ordering::Acquire).then_some(received)
    };
    let template = request.try_clone();
    let mut first = Some(request);
    let opener = move |from: Option<Option<u64>>| {
        open(
            &client,
            first.take(),
            template.as_ref(),
            &validator,
            from.flatten(),
        )
    };
    let stream = policy
        .call_stream_resumable(checkpoint, opener)?
        .resumable_when(Option::is_some)
        .classify(download_outcome as fn(&DownloadError) -> Outcome);
    match policy.settings().attempt_timeout() {
        Some(stall) => stream.stall_timeout(stall),
        None => Ok(stream),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_range_is_read_for_its_start_or_a_416s_length() {
        let range = |v: &'static str| range_start(Some(&HeaderValue::from_static(v)));
        assert_eq!(range("bytes 1000-1999/2000"), Some(1000));
        assert_eq!(range("bytes 0-0/*"), Some(0));
        assert_eq!(range("bytes */2000"), Some(2000));
        assert_eq!(range("items 1-2/3"), None);
        assert_eq!(range("bytes x-1/2"), None);
        assert_eq!(range_start(None), None);
    }

    #[test]
    fn only_a_strong_tag_is_strong() {
        assert!(is_strong(&HeaderValue::from_static("\"v1\"")));
        assert!(!is_strong(&HeaderValue::from_static("W/\"v1\"")));
    }
}
