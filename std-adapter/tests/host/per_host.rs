//! The tower layer's per-host scope: each host a request names gets its own breaker, in a
//! bounded table; over a fake service on tokio's paused clock, then over two real HTTP servers
//! on 127.0.0.1.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::http::StatusCode as AxumStatus;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_std::tower::{PolicyLayer, DEFAULT_HOSTS};
use stormguard_std::{Backoff, Breaker, CallError, Jitter, Policy, RefusalReason, State};
use stormguard_std::{Clock, KeyedPolicy, Listener};
use tower::{service_fn, Layer, ServiceExt};

/// One attempt per call and a breaker that opens on 2 failures in a row: each host's breaker
/// is a copy of this one's.
fn policy() -> Policy {
    Policy::builder("upstreams")
        .breaker(Breaker::of(2, "upstreams").unwrap())
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .max_attempts(1)
        .build()
        .unwrap()
}

/// A service for which `down.example` answers 500 and every other host 200, counting the
/// requests that reach it.
fn hosts_service(
    hits: Arc<AtomicU32>,
) -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |req: Request<String>| {
        hits.fetch_add(1, Ordering::Relaxed);
        let down = req.uri().host() == Some("down.example");
        async move {
            let mut r = Response::new(String::new());
            if down {
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            }
            Ok(r)
        }
    })
}

fn get_from(uri: &str) -> Request<String> {
    Request::get(uri).body(String::new()).unwrap()
}

/// The table's keys, sorted.
fn keys<C: Clock + Clone, L: Listener + Clone>(hosts: &KeyedPolicy<String, C, L>) -> Vec<String> {
    let mut keys: Vec<String> = hosts.snapshots().into_iter().map(|(k, _)| k).collect();
    keys.sort();
    keys
}

#[tokio::test(start_paused = true)]
async fn a_failing_host_opens_its_own_breaker_and_other_hosts_are_still_served() {
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy()).per_host().unwrap();
    let svc = layer.layer(hosts_service(hits.clone()));

    for _ in 0..2 {
        let r = svc.clone().oneshot(get_from("http://down.example/a")).await;
        assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let refused = svc.clone().oneshot(get_from("http://down.example/a")).await;
    assert!(
        matches!(&refused, Err(CallError::Rejected { rejection, .. }) if rejection.reason == RefusalReason::BreakerOpen),
        "{refused:?}"
    );
    assert_eq!(
        hits.load(Ordering::Relaxed),
        2,
        "the open host got no request"
    );

    // Another host, and the same host under another port, each have their own breaker.
    for uri in ["http://up.example/a", "http://DOWN.example:8080/a"] {
        let r = svc.clone().oneshot(get_from(uri)).await.unwrap();
        assert_ne!(r.status(), StatusCode::INTERNAL_SERVER_ERROR, "{uri}");
    }

    let hosts = layer.hosts().unwrap();
    let mut states = hosts.snapshots();
    states.sort_by(|a, b| a.0.cmp(&b.0));
    let states: Vec<(&str, State)> = states.iter().map(|(k, s)| (k.as_str(), s.state)).collect();
    assert_eq!(
        states,
        [
            ("down.example:80", State::Open),
            ("down.example:8080", State::Closed),
            ("up.example:80", State::Closed),
        ]
    );
    // The template's own breaker judged none of it.
    assert_eq!(layer.policy().breaker().unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn every_spelling_of_a_host_is_one_breaker_and_no_key_holds_credentials() {
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy()).per_host().unwrap();
    let svc = layer.layer(hosts_service(hits.clone()));
    for _ in 0..2 {
        let r = svc.clone().oneshot(get_from("http://down.example/a")).await;
        assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    // 100 spellings of the same host and port: case, a fully qualified name's trailing dot,
    // the default port written out, user information with and without a password.
    let hosts = [
        "down.example",
        "DOWN.example",
        "Down.Example.",
        "down.example.",
    ];
    let ports = ["", ":80"];
    let users = ["", "user@", "user:s3cret@", "a%40b:p@", "admin:@"];
    let mut spellings = Vec::new();
    for host in hosts {
        for port in ports {
            for user in users {
                spellings.push(format!("http://{user}{host}{port}/a"));
            }
        }
    }
    for i in 0..60 {
        spellings.push(format!("http://u{i}:s3cret{i}@DoWn.ExAmPlE.:80/a"));
    }
    assert_eq!(spellings.len(), 100);
    // All at once: each refusal serves its guarded pause, and 100 of them one after another
    // would outlast the break.
    let calls = spellings
        .iter()
        .map(|uri| svc.clone().oneshot(get_from(uri)));
    let refused = futures_util::future::join_all(calls).await;
    let served: Vec<&String> = spellings
        .iter()
        .zip(&refused)
        .filter(|(_, r)| !matches!(r, Err(CallError::Rejected { rejection, .. }) if rejection.reason == RefusalReason::BreakerOpen))
        .map(|(uri, _)| uri)
        .collect();
    assert!(
        served.is_empty(),
        "not refused as the open host: {served:?}"
    );
    assert_eq!(hits.load(Ordering::Relaxed), 2);
    assert_eq!(keys(layer.hosts().unwrap()), ["down.example:80"]);
    // An https request to the same name is another port: its own breaker.
    let r = svc
        .clone()
        .oneshot(get_from("https://down.example/a"))
        .await;
    assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        keys(layer.hosts().unwrap()),
        ["down.example:443", "down.example:80"]
    );
}

#[tokio::test(start_paused = true)]
async fn per_host_is_on_by_default_a_request_naming_no_host_uses_the_policys_own_breaker() {
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy());
    let svc = layer.layer(hosts_service(hits.clone()));
    for _ in 0..2 {
        let r = svc.clone().oneshot(get_from("http://down.example/a")).await;
        assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let hosts = layer.hosts().expect("a table by default");
    assert_eq!(
        hosts
            .breaker(&"down.example:80".to_owned())
            .unwrap()
            .state(),
        State::Open
    );
    // Another host is served; so is a request naming no host, judged by the policy's own
    // breaker, which saw none of the failures.
    let r = svc.clone().oneshot(get_from("http://up.example/a")).await;
    assert_eq!(r.unwrap().status(), StatusCode::OK);
    let r = svc.clone().oneshot(get_from("/a")).await;
    assert_eq!(r.unwrap().status(), StatusCode::OK);
    assert_eq!(hosts.len(), 2, "the relative request took no key");
    assert_eq!(layer.policy().breaker().unwrap().state(), State::Closed);

    // With one scope, the same failures open the policy's own breaker for every host.
    let single = PolicyLayer::new(policy()).single_scope();
    assert!(single.hosts().is_none());
    let svc = single.layer(hosts_service(hits.clone()));
    for _ in 0..2 {
        let _ = svc.clone().oneshot(get_from("http://down.example/a")).await;
    }
    let refused = svc.clone().oneshot(get_from("http://up.example/a")).await;
    assert!(
        matches!(&refused, Err(CallError::Rejected { .. })),
        "{refused:?}"
    );
    assert_eq!(single.policy().breaker().unwrap().state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_new_host_meeting_a_full_table_of_open_breakers_is_refused_as_keyed_full() {
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy()).per_host_capacity(1).unwrap();
    let svc = layer.layer(hosts_service(hits.clone()));
    for _ in 0..2 {
        let _ = svc.clone().oneshot(get_from("http://down.example/")).await;
    }
    let started = tokio::time::Instant::now();
    let slot = stormguard_std::tower::AttemptSlot::new();
    let mut req = get_from("http://up.example/");
    req.extensions_mut().insert(slot.clone());
    let refused = svc.clone().oneshot(req).await;
    // The request's attempt log names the full table.
    let log = slot.take().expect("the log of a refused call");
    assert_eq!(log.to_string(), "attempt 1: refused locally (keyed_full)");
    match refused {
        Err(CallError::Rejected { rejection, last }) => {
            assert_eq!(rejection.reason, RefusalReason::KeyedFull);
            assert!(last.is_none());
            assert!(rejection.retry_after > stormguard_std::Duration::ZERO);
        }
        other => panic!("expected a keyed_full rejection, got {other:?}"),
    }
    // Refused after the guarded pause, like every refusal, and nothing was sent.
    assert!(started.elapsed() >= std::time::Duration::from_millis(100));
    assert_eq!(hits.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn scope_by_keys_breakers_by_any_function_of_the_request() {
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy())
        .per_host()
        .unwrap()
        .scope_by(|req: &Request<String>| {
            req.uri().path().split('/').nth(1).unwrap_or("").to_owned()
        });
    let svc = layer.layer(hosts_service(hits.clone()));
    for _ in 0..2 {
        let _ = svc
            .clone()
            .oneshot(get_from("http://down.example/tenant-a/x"))
            .await;
    }
    // Same host, another tenant: its own breaker, still closed.
    let r = svc
        .clone()
        .oneshot(get_from("http://down.example/tenant-b/x"))
        .await;
    assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
    let hosts = layer.hosts().unwrap();
    assert_eq!(
        hosts.breaker(&"tenant-a".to_owned()).unwrap().state(),
        State::Open
    );
    assert_eq!(
        hosts.breaker(&"tenant-b".to_owned()).unwrap().state(),
        State::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn a_layers_clones_and_their_services_share_one_table_made_on_first_use() {
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy());
    // Cloned before any service exists, so before the default table is made.
    let twin = layer.clone();
    let svc = layer.layer(hosts_service(hits.clone()));
    let other = twin.layer(hosts_service(hits.clone()));
    for _ in 0..2 {
        let r = svc.clone().oneshot(get_from("http://down.example/a")).await;
        assert_eq!(r.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    // The twin's service meets the breaker the first service opened.
    let refused = other
        .clone()
        .oneshot(get_from("http://down.example/a"))
        .await;
    assert!(
        matches!(&refused, Err(CallError::Rejected { rejection, .. }) if rejection.reason == RefusalReason::BreakerOpen),
        "{refused:?}"
    );
    assert_eq!(hits.load(Ordering::Relaxed), 2);
    let r = other.oneshot(get_from("http://up.example/a")).await;
    assert_eq!(r.unwrap().status(), StatusCode::OK);
    let (mine, theirs) = (layer.hosts().unwrap(), twin.hosts().unwrap());
    assert_eq!((mine.len(), theirs.len()), (2, 2));
    assert_eq!(mine.capacity(), DEFAULT_HOSTS);
    // A layer's table asked for before any service is the one its services then use.
    let early = PolicyLayer::new(policy());
    assert_eq!(early.hosts().map(|h| h.len()), Some(0));
    let svc = early.layer(hosts_service(hits.clone()));
    let r = svc.oneshot(get_from("http://up.example/a")).await;
    assert_eq!(r.unwrap().status(), StatusCode::OK);
    assert_eq!(early.hosts().map(|h| h.len()), Some(1));
}

#[test]
fn a_per_host_layer_needs_a_breaker_and_room_for_a_host() {
    let no_breaker = Policy::builder("upstreams").no_breaker().build().unwrap();
    let e = PolicyLayer::new(no_breaker).per_host().unwrap_err();
    assert_eq!(e, stormguard_std::keyed::KeyedSetupError::NoBreaker);
    let e = PolicyLayer::new(policy()).per_host_capacity(0).unwrap_err();
    assert_eq!(e, stormguard_std::keyed::KeyedSetupError::ZeroCapacity);
    assert!(PolicyLayer::new(policy())
        .per_host_capacity(DEFAULT_HOSTS)
        .is_ok());
}

/// Serves `status` on every path, on an ephemeral loopback port; returns its base URL.
async fn serve(status: AxumStatus, hits: Arc<AtomicU32>) -> String {
    let app = Router::new().fallback(get(move || {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::Relaxed);
            (status, "body")
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_real_sockets_a_failing_server_is_shed_while_its_neighbour_is_served() {
    let down_hits = Arc::new(AtomicU32::new(0));
    let up_hits = Arc::new(AtomicU32::new(0));
    let down = serve(AxumStatus::INTERNAL_SERVER_ERROR, down_hits.clone()).await;
    let up = serve(AxumStatus::OK, up_hits.clone()).await;

    let layer = PolicyLayer::new(policy()).per_host().unwrap();
    let client = layer.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let send = |url: String| {
        let client = client.clone();
        async move {
            let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
            client.oneshot(req).await
        }
    };

    // Interleaved, as a client calling both would.
    let mut refused = 0;
    for _ in 0..10 {
        match send(format!("{down}/x")).await {
            Ok(r) => assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR),
            Err(CallError::Rejected { rejection, .. }) => {
                assert_eq!(rejection.reason, RefusalReason::BreakerOpen);
                refused += 1;
            }
            Err(other) => panic!("{other}"),
        }
        let r = send(format!("{up}/y")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    assert_eq!(
        down_hits.load(Ordering::Relaxed),
        2,
        "shed after 2 failures"
    );
    assert_eq!(refused, 8);
    assert_eq!(up_hits.load(Ordering::Relaxed), 10);
    let hosts = layer.hosts().unwrap();
    let down_key = down.trim_start_matches("http://").to_owned();
    let up_key = up.trim_start_matches("http://").to_owned();
    assert_eq!(hosts.breaker(&down_key).unwrap().state(), State::Open);
    assert_eq!(hosts.breaker(&up_key).unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_health_report_lists_each_host_and_one_host_down_degrades_it() {
    use stormguard_std::health::{Registry, Status};
    let hits = Arc::new(AtomicU32::new(0));
    let layer = PolicyLayer::new(policy()).per_host().unwrap();
    let registry = Registry::new();
    registry.add_keyed(layer.hosts().unwrap());
    let svc = layer.layer(hosts_service(hits));
    assert!(registry.report().breakers.is_empty());
    for uri in [
        "http://up.example/",
        "http://down.example/",
        "http://down.example/",
    ] {
        let _ = svc.clone().oneshot(get_from(uri)).await;
    }
    let report = registry.report();
    let mut hosts: Vec<(Option<&str>, Status)> = report
        .breakers
        .iter()
        .map(|b| (b.key.as_deref(), b.status))
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        [
            (Some("down.example:80"), Status::Unavailable),
            (Some("up.example:80"), Status::Healthy)
        ]
    );
    assert_eq!(report.status, Status::Degraded);
}
