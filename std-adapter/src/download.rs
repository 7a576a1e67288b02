//! Resumable downloads over reqwest (feature `reqwest`): [`download`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use http::header::{CONTENT_RANGE, ETAG, IF_RANGE, RANGE};
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
    /// The download cannot resume: the first response had no strong `ETag` to resume against
    /// (a weak one, `W/"..."`, may differ byte for byte), or the request cannot be sent again
    /// (a streaming body).
    NotResumable,
}

impl fmt::Display for DownloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownloadError::Request(e) => write!(f, "download failed: {e}"),
            DownloadError::Status { status, .. } => write!(f, "download answered {status}"),
            DownloadError::Changed => f.write_str("the resource changed during the download"),
            DownloadError::NotResumable => {
                f.write_str("the download broke and cannot resume (no strong ETag)")
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
/// HTTP rules ([`http_outcome`]: a `5xx` transient, a `429` throttled) except that any other
/// status that is no success ends the download ([`Outcome::Permanent`]), and so does a
/// resource that changed or cannot be resumed.
#[must_use]
pub fn download_outcome(error: &DownloadError) -> Outcome {
    match error {
        DownloadError::Request(_) => Outcome::Transient,
        DownloadError::Status {
            status,
            retry_after,
        } => match http_outcome(*status, &http::HeaderMap::new()) {
            Outcome::Throttled { .. } => Outcome::Throttled {
                retry_after: *retry_after,
            },
            Outcome::Success => Outcome::Permanent,
            other => other,
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

/// Whether a `206`'s `Content-Range` starts at `offset` (`bytes 1000-1999/2000`).
fn starts_at(range: Option<&HeaderValue>, offset: u64) -> bool {
    let Some(rest) = range
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
    else {
        return false;
    };
    rest.split('-')
        .next()
        .and_then(|start| start.trim().parse::<u64>().ok())
        == Some(offset)
}

/// Opens the connection that reads `request`'s resource from byte `from` (the start when
/// `None`), keeping the first response's strong `ETag` in `etag`.
fn open(
    client: &reqwest::Client,
    request: &reqwest::Request,
    etag: &Arc<Mutex<Option<HeaderValue>>>,
    from: Option<u64>,
) -> Opening {
    let client = client.clone();
    let etag = Arc::clone(etag);
    let request = request.try_clone();
    Box::pin(async move {
        let mut request = request.ok_or(DownloadError::NotResumable)?;
        if let Some(offset) = from {
            let tag = etag.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let tag = tag.ok_or(DownloadError::NotResumable)?;
            let range = HeaderValue::from_str(&format!("bytes={offset}-"))
                .map_err(|_| DownloadError::NotResumable)?;
            request.headers_mut().insert(RANGE, range);
            request.headers_mut().insert(IF_RANGE, tag);
        }
        let response = client
            .execute(request)
            .await
            .map_err(DownloadError::Request)?;
        let status = response.status();
        let resumed = match from {
            Some(offset) if status == StatusCode::PARTIAL_CONTENT => {
                if !starts_at(response.headers().get(CONTENT_RANGE), offset) {
                    return Err(DownloadError::Changed);
                }
                true
            }
            // The validator no longer matches: the whole new resource came back.
            Some(_) if status.is_success() => return Err(DownloadError::Changed),
            _ => false,
        };
        if !status.is_success() {
            return Err(DownloadError::Status {
                status,
                retry_after: retry_after(response.headers()),
            });
        }
        if !resumed {
            let strong = response
                .headers()
                .get(ETAG)
                .filter(|t| is_strong(t))
                .cloned();
            *etag.lock().unwrap_or_else(PoisonError::into_inner) = strong;
        }
        Ok(Chunks {
            body: Box::pin(reqwest::Body::from(response)),
        })
    })
}

/// A resumable download: a [`CallStream`] of the resource's bytes.
pub type Download<'p, K, L, O, CP> =
    CallStream<'p, K, L, Bytes, DownloadError, Chunks, O, u64, CP, fn(&DownloadError) -> Outcome>;

/// Downloads `request`'s resource under `policy` as a stream of chunks, resuming a body that
/// breaks mid-way.
///
/// The request is a streaming call of the policy ([`Policy::call_stream_resumable`]): retried
/// until the first chunk arrives, the attempt timeout bounding that wait; after it the gap
/// between two chunks is bounded by the attempt timeout too, so a stalled body ends as a
/// timeout. When the body breaks or stalls, the download restarts from the last byte received
/// (up to 3 times by default) with `Range: bytes=N-` and `If-Range` set to the first
/// response's `ETag`, but only when that `ETag` is strong: without one the download ends with
/// [`DownloadError::NotResumable`]. A server that sends the whole resource back (it changed)
/// or a range that starts elsewhere ends it with [`DownloadError::Changed`]. Failures count by
/// [`download_outcome`].
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
        impl FnMut(Option<u64>) -> Opening + Send + 'static,
        impl FnMut(&Bytes) -> u64 + Send + 'static,
    >,
    SettingsError,
>
where
    K: Clock,
    L: Listener,
{
    let etag = Arc::new(Mutex::new(None));
    let mut received = 0u64;
    let checkpoint = move |chunk: &Bytes| {
        received = received.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        received
    };
    let opener = move |from: Option<u64>| open(&client, &request, &etag, from);
    let stream = policy
        .call_stream_resumable(checkpoint, opener)?
        .classify(download_outcome as fn(&DownloadError) -> Outcome);
    match policy.settings().attempt_timeout() {
        Some(stall) => stream.stall_timeout(stall),
        None => Ok(stream),
    }
}
