//! Classifiers: how an attempt's result counts (DESIGN.md, "The breaker": success, transient,
//! throttled, permanent, cancelled). The trait and the default are the core's; the HTTP preset
//! (feature `http`) is this crate's.

pub use stormguard_core::{Classify, EveryErrorTransient};

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use self::http_preset::{http_outcome, published_quota, retry_after, Http};

#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub use self::grpc_preset::{grpc_outcome, is_grpc, GrpcBodyEnd};

#[cfg(feature = "tonic")]
mod grpc_preset {
    use http::{header::CONTENT_TYPE, HeaderMap, StatusCode};
    use stormguard_core::wire::grpc::{
        parse_pushback, parse_status, status_outcome_with_pushback, Code,
    };
    use stormguard_core::Outcome;

    /// How the body of a gRPC response ended, as the tower layer read it before classifying
    /// the response (see [`GrpcLayer`](crate::tower::GrpcLayer)): the layer puts it in the
    /// response's extensions, where [`Http`](super::Http) finds the status a response sent in
    /// its trailers.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum GrpcBodyEnd {
        /// The body ended with these trailers (`grpc-status` among them, normally).
        Trailers(HeaderMap),
        /// The body ended without trailers: the response was cut short.
        NoTrailers,
        /// Reading the body failed (the connection broke mid-response).
        Failed,
    }

    /// Whether `headers` say the message is gRPC: a content type of `application/grpc`,
    /// alone or with a `+format` or parameters (gRPC-Web's `application/grpc-web`, whose
    /// trailers travel in the body, is not).
    ///
    /// ```
    /// use http::HeaderMap;
    /// let mut h = HeaderMap::new();
    /// h.insert("content-type", "application/grpc+proto".parse().unwrap());
    /// assert!(stormguard_std::classify::is_grpc(&h));
    /// h.insert("content-type", "application/grpc-web".parse().unwrap());
    /// assert!(!stormguard_std::classify::is_grpc(&h));
    /// ```
    #[must_use]
    pub fn is_grpc(headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(CONTENT_TYPE) else {
            return false;
        };
        let Some(rest) = value.as_bytes().strip_prefix(b"application/grpc") else {
            return false;
        };
        matches!(rest.first(), None | Some(b'+' | b';'))
    }

    /// How a gRPC response counts: its `grpc-status` (from the headers of a trailers-only
    /// response, else from the trailers the layer read at the body's end, `end`) by the core's
    /// rules ([`status_outcome`](stormguard_core::wire::grpc::status_outcome): `UNAVAILABLE` and
    /// `DEADLINE_EXCEEDED` transient, `RESOURCE_EXHAUSTED` throttled with the
    /// `grpc-retry-pushback-ms` hint, `OK` a success, any other code permanent). An unreadable
    /// or missing `grpc-status` is `UNKNOWN`. A non-200 HTTP status without a `grpc-status`
    /// (a proxy's answer) counts by the HTTP rules; a body cut short or broken is transient; a
    /// 200 whose body was not read (a stream) is a success so far.
    ///
    /// ```
    /// use http::{HeaderMap, StatusCode};
    /// use stormguard_std::classify::{grpc_outcome, GrpcBodyEnd};
    /// use stormguard_std::Outcome;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("content-type", "application/grpc".parse().unwrap());
    /// let mut trailers = HeaderMap::new();
    /// trailers.insert("grpc-status", "14".parse().unwrap());
    /// let end = GrpcBodyEnd::Trailers(trailers);
    /// assert_eq!(grpc_outcome(StatusCode::OK, &headers, Some(&end)), Outcome::Transient);
    /// headers.insert("grpc-status", "5".parse().unwrap()); // trailers-only: NOT_FOUND
    /// assert_eq!(grpc_outcome(StatusCode::OK, &headers, None), Outcome::Permanent);
    /// ```
    #[must_use]
    pub fn grpc_outcome(
        status: StatusCode,
        headers: &HeaderMap,
        end: Option<&GrpcBodyEnd>,
    ) -> Outcome {
        if headers.contains_key("grpc-status") {
            return status_in(headers);
        }
        if status != StatusCode::OK {
            return super::http_outcome(status, headers);
        }
        match end {
            Some(GrpcBodyEnd::Trailers(trailers)) => status_in(trailers),
            Some(GrpcBodyEnd::NoTrailers | GrpcBodyEnd::Failed) => Outcome::Transient,
            None => Outcome::Success,
        }
    }

    /// The outcome of the `grpc-status` in `map` (headers or trailers).
    fn status_in(map: &HeaderMap) -> Outcome {
        let code = map
            .get("grpc-status")
            .and_then(|v| parse_status(v.as_bytes()))
            .unwrap_or(Code::UNKNOWN);
        let pushback = map
            .get("grpc-retry-pushback-ms")
            .and_then(|v| parse_pushback(v.as_bytes()));
        status_outcome_with_pushback(code, pushback)
    }
}

#[cfg(feature = "http")]
mod http_preset {
    use http::{header::RETRY_AFTER, HeaderMap, Response, StatusCode};
    use stormguard_core::wire::http::{parse_retry_after, status_outcome_with_retry_after};
    use stormguard_core::wire::quota::{parse_fields, Published};
    use stormguard_core::{Duration, Outcome};

    use super::Classify;

    /// The HTTP preset: connection errors (`Err`), 408 and 5xx are transient; 429, and 503
    /// with a readable `Retry-After` header, are throttled with the header honoured as
    /// `retry_after`; other 4xx are answers (the dependency is healthy and said no to this
    /// request): they are returned to the caller, never retried, and count as successes for the
    /// dependency's health; everything else succeeds. The default classifier of the tower
    /// layer. The rules are the core's
    /// ([`status_outcome_with_retry_after`](stormguard_core::wire::http::status_outcome_with_retry_after),
    /// which also says how a throttle asking for no wait, `Retry-After: 0`, counts); this type
    /// reads a response's status and headers for them.
    ///
    /// ```
    /// use http::{Response, StatusCode};
    /// use stormguard_std::{Duration, Outcome};
    /// use stormguard_std::{Classify, Http};
    ///
    /// let status = |s: u16| Response::builder().status(s).body(()).unwrap();
    /// let c = |r: Result<Response<()>, ()>| Http.classify(&r);
    /// assert_eq!(c(Ok(status(200))), Outcome::Success);
    /// assert_eq!(c(Ok(status(502))), Outcome::Transient);
    /// assert_eq!(c(Ok(status(408))), Outcome::Transient);
    /// assert_eq!(c(Ok(status(404))), Outcome::Success); // an answer: the dependency is fine
    /// assert_eq!(c(Err(())), Outcome::Transient);
    /// let throttled = Response::builder().status(429).header("retry-after", "3").body(()).unwrap();
    /// assert_eq!(
    ///     c(Ok(throttled)),
    ///     Outcome::Throttled { retry_after: Some(Duration::from_secs(3)) }
    /// );
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Http;

    impl<B, E> Classify<Response<B>, E> for Http {
        fn classify(&self, result: &Result<Response<B>, E>) -> Outcome {
            match result {
                #[cfg(feature = "tonic")]
                Ok(response) if super::is_grpc(response.headers()) => super::grpc_outcome(
                    response.status(),
                    response.headers(),
                    response.extensions().get::<super::GrpcBodyEnd>(),
                ),
                Ok(response) => http_outcome(response.status(), response.headers()),
                Err(_) => Outcome::Transient,
            }
        }

        fn published(&self, result: &Result<Response<B>, E>) -> Published {
            match result {
                Ok(response) => published_quota(response.headers()),
                Err(_) => Published::NONE,
            }
        }
    }

    /// A `reqwest::Client`'s results (feature `reqwest`): the same rules on the response's
    /// status and headers; every error (reqwest's: connect, timeout, body) is transient.
    ///
    /// ```
    /// use stormguard_std::Outcome;
    /// use stormguard_std::{Classify, Http};
    /// let throttled = http::Response::builder().status(429).body("")?;
    /// let r: Result<reqwest::Response, reqwest::Error> = Ok(throttled.into());
    /// assert_eq!(Http.classify(&r), Outcome::Throttled { retry_after: None });
    /// # Ok::<(), http::Error>(())
    /// ```
    #[cfg(feature = "reqwest")]
    #[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
    impl<E> Classify<reqwest::Response, E> for Http {
        fn classify(&self, result: &Result<reqwest::Response, E>) -> Outcome {
            match result {
                Ok(response) => http_outcome(response.status(), response.headers()),
                Err(_) => Outcome::Transient,
            }
        }

        fn published(&self, result: &Result<reqwest::Response, E>) -> Published {
            match result {
                Ok(response) => published_quota(response.headers()),
                Err(_) => Published::NONE,
            }
        }
    }

    /// How a response with `status` and `headers` counts, by the [`Http`] preset's rules (the
    /// core's [`status_outcome_with_retry_after`], with [`retry_after`] as the hint).
    ///
    /// ```
    /// use http::{HeaderMap, StatusCode};
    /// use stormguard_std::Outcome;
    /// // 503 without Retry-After: the server is failing, not defending itself.
    /// assert_eq!(
    ///     stormguard_std::classify::http_outcome(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new()),
    ///     Outcome::Transient
    /// );
    /// ```
    #[must_use]
    pub fn http_outcome(status: StatusCode, headers: &HeaderMap) -> Outcome {
        status_outcome_with_retry_after(status.as_u16(), || retry_after(headers))
    }

    /// The `Retry-After` header as a duration: delay-seconds, or an HTTP date counted from the
    /// system clock (a date in the past is zero), by the core's [`parse_retry_after`]. `None`
    /// when absent or unreadable.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use stormguard_std::Duration;
    /// let mut h = HeaderMap::new();
    /// h.insert("retry-after", "120".parse().unwrap());
    /// assert_eq!(stormguard_std::classify::retry_after(&h), Some(Duration::from_secs(120)));
    /// h.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
    /// assert_eq!(stormguard_std::classify::retry_after(&h), Some(Duration::ZERO));
    /// h.insert("retry-after", "soon".parse().unwrap());
    /// assert_eq!(stormguard_std::classify::retry_after(&h), None);
    /// ```
    #[must_use]
    pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
        let value = headers.get(RETRY_AFTER)?.as_bytes();
        // A clock set before 1970 reads as 1970: every date is then still ahead of it.
        let wall_clock = || {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            Some(Duration::from(now.unwrap_or_default()))
        };
        parse_retry_after(value, wall_clock)
    }

    /// The seconds since the Unix epoch on the system clock, for resets published as a Unix
    /// time (`X-RateLimit-Reset: 1700000060`).
    fn unix_now() -> Option<u64> {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs())
    }

    /// The quota `headers` publish, by the core's
    /// [`parse_fields`](stormguard_core::wire::quota::parse_fields): the IETF draft's
    /// `RateLimit` with `RateLimit-Policy`, its older `RateLimit-*` fields and the
    /// `X-RateLimit-*` ones, the tightest kept; a malformed, over-long or repeated value is
    /// ignored, and a reset given as a Unix time counts from the system clock. What the
    /// [`Http`] preset hands a policy that keeps published quotas
    /// ([`PolicyBuilder::published_quotas`](crate::PolicyBuilder::published_quotas)).
    ///
    /// ```
    /// use http::HeaderMap;
    /// use stormguard_std::classify::published_quota;
    /// use stormguard_std::Duration;
    ///
    /// let mut h = HeaderMap::new();
    /// h.insert("ratelimit", r#""default";r=50;t=30"#.parse().unwrap());
    /// h.insert("ratelimit-policy", r#""default";q=100;w=60"#.parse().unwrap());
    /// let p = published_quota(&h);
    /// assert_eq!((p.limit, p.remaining), (Some(100), Some(50)));
    /// assert_eq!(p.reset, Some(Duration::from_secs(30)));
    ///
    /// let mut h = HeaderMap::new();
    /// h.insert("x-ratelimit-limit", "60".parse().unwrap());
    /// h.insert("x-ratelimit-remaining", "oops".parse().unwrap());
    /// assert_eq!(published_quota(&h).remaining, None);
    /// h.insert("x-ratelimit-remaining", "7".parse().unwrap());
    /// h.append("x-ratelimit-remaining", "70".parse().unwrap()); // repeated: ambiguous
    /// assert_eq!(published_quota(&h).remaining, None);
    /// ```
    #[must_use]
    pub fn published_quota(headers: &HeaderMap) -> Published {
        let fields = headers
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
        parse_fields(fields, unix_now)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn response(status: u16, retry_after: Option<&str>) -> Response<()> {
            let mut b = Response::builder().status(status);
            if let Some(v) = retry_after {
                b = b.header(RETRY_AFTER, v);
            }
            b.body(()).unwrap()
        }

        #[test]
        fn the_http_preset_sorts_statuses() {
            let c = |r: Response<()>| Http.classify(&Ok::<_, ()>(r));
            assert_eq!(c(response(204, None)), Outcome::Success);
            assert_eq!(c(response(304, None)), Outcome::Success);
            assert_eq!(c(response(500, None)), Outcome::Transient);
            assert_eq!(c(response(503, None)), Outcome::Transient);
            assert_eq!(c(response(503, Some("soon"))), Outcome::Transient);
            assert_eq!(
                c(response(503, Some("7"))),
                Outcome::Throttled {
                    retry_after: Some(Duration::from_secs(7))
                }
            );
            assert_eq!(
                c(response(429, None)),
                Outcome::Throttled { retry_after: None }
            );
        }

        #[test]
        fn a_408_is_transient_and_other_4xx_are_answers_counted_as_healthy() {
            let c = |r: Response<()>| Http.classify(&Ok::<_, ()>(r));
            assert_eq!(c(response(408, None)), Outcome::Transient);
            for status in [400, 401, 403, 404, 409, 410, 422, 451, 499] {
                assert_eq!(c(response(status, None)), Outcome::Success, "{status}");
            }
        }

        // Reads the wall clock, which miri's isolation does not offer; every other test step
        // runs it.
        #[cfg(not(miri))]
        #[test]
        fn a_future_http_date_is_counted_from_now() {
            let at = std::time::SystemTime::now() + std::time::Duration::from_secs(90);
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, httpdate::fmt_http_date(at).parse().unwrap());
            let d = retry_after(&h).unwrap();
            assert!(
                d > Duration::from_secs(85) && d <= Duration::from_secs(90),
                "{d}"
            );
        }
    }
}
