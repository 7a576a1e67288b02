//! A tonic client behind the tower layer.
//!
//! `cargo run -p stormguard-std --features tonic --example grpc_client`
//!
//! The example starts a small gRPC service on 127.0.0.1 whose first two answers are
//! `UNAVAILABLE`, then calls it through `GrpcLayer` + a tonic channel: the unary call is
//! retried (its third attempt succeeds), and the service prints the `grpc-timeout` each attempt
//! carries (the policy's attempt timeout plus a small margin). The message types and stubs are
//! written by hand on prost's derive and tonic's codec, as `tonic-prost-build` would generate
//! them from a `.proto`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use stormguard_std::tower::{GrpcLayer, GRPC_TIMEOUT};
use stormguard_std::Policy;
use tonic::body::Body;
use tonic::transport::{Endpoint, Server};
use tonic_prost::ProstCodec;

/// The request: which quote.
#[derive(Clone, PartialEq, prost::Message)]
struct QuoteRequest {
    #[prost(string, tag = "1")]
    symbol: String,
}

/// The answer: the price in cents.
#[derive(Clone, PartialEq, prost::Message)]
struct Quote {
    #[prost(uint64, tag = "1")]
    cents: u64,
}

const GET_QUOTE: &str = "/quotes.Quotes/Get";

/// The service: `UNAVAILABLE` for its first two calls, then a price.
#[derive(Clone)]
struct Quotes(Arc<AtomicU32>);

impl tonic::server::NamedService for Quotes {
    const NAME: &'static str = "quotes.Quotes";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<Body>> for Quotes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            let timeout = req
                .headers()
                .get(GRPC_TIMEOUT)
                .and_then(|v| v.to_str().ok());
            println!("  attempt {n}: grpc-timeout {}", timeout.unwrap_or("?"));
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Quote, QuoteRequest>::default());
            Ok(grpc.unary(GetQuote { warm: n > 2 }, req).await)
        })
    }
}

/// The handler of `Get`.
struct GetQuote {
    warm: bool,
}

impl tonic::server::UnaryService<QuoteRequest> for GetQuote {
    type Response = Quote;
    type Future = BoxFuture<Result<tonic::Response<Quote>, tonic::Status>>;

    fn call(&mut self, _: tonic::Request<QuoteRequest>) -> Self::Future {
        let warm = self.warm;
        Box::pin(async move {
            if warm {
                Ok(tonic::Response::new(Quote { cents: 4_200 }))
            } else {
                Err(tonic::Status::unavailable("warming up"))
            }
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let service = Quotes(Arc::new(AtomicU32::new(0)));
    tokio::spawn(
        Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming),
    );

    // The client: a tonic channel behind a policy (3 attempts of 500 ms at most).
    let policy = Policy::builder("quotes")
        .attempt_timeout(Duration::from_millis(500))
        .build()?;
    let channel = Endpoint::from_shared(url)?.connect().await?;
    let guarded = tower::ServiceBuilder::new()
        .layer(GrpcLayer::new(policy))
        .service(channel);
    // A generated client wraps the same: `QuotesClient::new(guarded)`.
    let mut client = tonic::client::Grpc::new(guarded);

    println!("Quotes.Get (unary: retried while UNAVAILABLE)");
    client.ready().await?;
    let request = tonic::Request::new(QuoteRequest {
        symbol: "ACME".into(),
    });
    let codec = ProstCodec::<QuoteRequest, Quote>::default();
    let quote = client
        .unary(request, PathAndQuery::from_static(GET_QUOTE), codec)
        .await?;
    println!("-> {} cents", quote.into_inner().cents);
    Ok(())
}
