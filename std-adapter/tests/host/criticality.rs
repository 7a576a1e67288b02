//! Criticality through the std adapter: a call's label reaches the core's rule, travels on
//! `CRITICALITY_HEADER` through real servers on 127.0.0.1, and is capped on the receiving side.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_core::BudgetSettings;
use stormguard_std::nested::inbound_criticality;
use stormguard_std::tower::{NestedRetryLayer, PolicyLayer, CRITICALITY_HEADER};
use stormguard_std::{Backoff, CallError, CallOptions, Criticality, Policy, RefusalReason};
use tower::{Layer, ServiceExt};

type Hyper = Client<HttpConnector, Full<Bytes>>;

fn hyper() -> Hyper {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn listen(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A budget of one retry, no floor to speak of.
fn one_retry() -> BudgetSettings {
    BudgetSettings::builder("feed")
        .floor_per_second(0.1)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_sheddable_call_is_refused_its_retry_where_a_default_one_had_the_budget() {
    let policy = Policy::builder("feed")
        .no_breaker()
        .budget_settings(one_retry())
        .backoff(Backoff::none())
        .build()
        .unwrap();
    let fail = |_| async { Err::<u32, _>("down") };
    // Default: the budget's one retry is spent, then its refusal is the budget's.
    let r = policy.call(fail).await.unwrap_err();
    assert_eq!(
        r.rejection().unwrap().reason,
        RefusalReason::BudgetExhausted
    );
    // Sheddable: the budget is more than half spent, so the retry is shed first.
    let sheddable = CallOptions::new().criticality(Criticality::Sheddable);
    let r = policy.call_with(sheddable, fail).await.unwrap_err();
    assert_eq!(r.rejection().unwrap().reason, RefusalReason::Shed);
    assert!(matches!(
        r,
        CallError::Rejected {
            last: Some("down"),
            ..
        }
    ));
}

/// The dependency: records the label header of each request it gets.
async fn dependency(seen: Arc<Mutex<Vec<Option<String>>>>) -> String {
    let app = Router::new().fallback(get(move |headers: http::HeaderMap| {
        let seen = seen.clone();
        async move {
            let label = headers
                .get(CRITICALITY_HEADER)
                .map(|v| v.to_str().unwrap().to_owned());
            seen.lock().unwrap().push(label);
            "ok"
        }
    }));
    listen(app).await
}

/// The front service: lets callers claim up to `max`, answers with the label it serves under,
/// and calls the dependency through the policy layer while serving.
async fn front(dependency: String, max: Criticality) -> String {
    let policy = Policy::builder("dependency").build().unwrap();
    let client = PolicyLayer::new(policy).layer(hyper());
    let app = Router::new()
        .fallback(get(move || {
            let (client, url) = (client.clone(), dependency.clone());
            async move {
                let req = Request::get(format!("{url}/item"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                client.oneshot(req).await.unwrap();
                inbound_criticality().map_or("none", Criticality::as_str)
            }
        }))
        .layer(NestedRetryLayer::new("front").max_criticality(max));
    listen(app).await
}

/// One labelled (or not) request from a client through the front to the dependency: what the
/// front served it as, and the label the dependency received.
async fn through(label: Option<Criticality>, max: Criticality) -> (String, Option<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let front = front(dependency(seen.clone()).await, max).await;
    let client = PolicyLayer::new(Policy::builder("front").build().unwrap()).layer(hyper());
    let mut req = Request::get(format!("{front}/order"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    if let Some(c) = label {
        req.extensions_mut().insert(c);
    }
    let body = client.oneshot(req).await.unwrap().into_body();
    let served = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let received = seen.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    (served, received[0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_travels_on_the_header_down_a_chain_of_services_capped_by_each_server() {
    let run = async {
        // Sheddable, set by the client, reaches the front and is passed on to the dependency.
        let (served, received) = through(Some(Criticality::Sheddable), Criticality::Default).await;
        assert_eq!(served, "sheddable");
        assert_eq!(received.as_deref(), Some("sheddable"));
        // A client claiming critical is lowered to what the front allows, and so on down.
        let (served, received) = through(Some(Criticality::Critical), Criticality::Default).await;
        assert_eq!(served, "default");
        assert_eq!(received.as_deref(), Some("default"));
        // A front that trusts its callers keeps it.
        let (served, received) = through(Some(Criticality::Critical), Criticality::Critical).await;
        assert_eq!(served, "critical");
        assert_eq!(received.as_deref(), Some("critical"));
        // Unlabelled: no header anywhere.
        let (served, received) = through(None, Criticality::Critical).await;
        assert_eq!(served, "none");
        assert_eq!(received, None);
    };
    tokio::time::timeout(StdDuration::from_secs(30), run)
        .await
        .expect("bounded");
}

/// A front whose outbound client is a `reqwest::Client` behind the policy layer.
#[cfg(feature = "reqwest")]
async fn reqwest_front(dependency: String, max: Criticality) -> String {
    let policy = Policy::builder("dependency").build().unwrap();
    let http = reqwest::Client::new();
    let client = PolicyLayer::new(policy).layer(http.clone());
    let app = Router::new()
        .fallback(get(move || {
            let (client, http, url) = (client.clone(), http.clone(), dependency.clone());
            async move {
                let req = http.get(format!("{url}/item")).build().unwrap();
                client.oneshot(req).await.unwrap();
                "served"
            }
        }))
        .layer(NestedRetryLayer::new("front").max_criticality(max));
    listen(app).await
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reqwest_client_behind_the_layer_sends_the_label_it_serves_under() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let front = reqwest_front(dependency(seen.clone()).await, Criticality::Default).await;
    let client = PolicyLayer::new(Policy::builder("front").build().unwrap()).layer(hyper());
    for label in [Criticality::Sheddable, Criticality::Critical] {
        let mut req = Request::get(format!("{front}/order"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        req.extensions_mut().insert(label);
        client.clone().oneshot(req).await.unwrap();
    }
    // Sheddable travels as it is; critical is capped at the front's `Default`.
    assert_eq!(
        *seen.lock().unwrap(),
        [Some("sheddable".to_string()), Some("default".to_string())]
    );
}

#[cfg(feature = "tonic")]
#[test]
fn the_grpc_rules_read_a_label_from_the_request_and_write_it_as_metadata() {
    use stormguard_std::tower::{GrpcRequests, Requests};
    let mut req = http::Request::new(tonic::body::Body::empty());
    assert_eq!(GrpcRequests.criticality(&req), None);
    req.extensions_mut().insert(Criticality::Sheddable);
    assert_eq!(GrpcRequests.criticality(&req), Some(Criticality::Sheddable));
    GrpcRequests.set_criticality(&mut req, Criticality::Sheddable);
    assert_eq!(req.headers()[CRITICALITY_HEADER], "sheddable");
}
