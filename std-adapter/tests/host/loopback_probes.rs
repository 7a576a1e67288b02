//! A breaker in front of a microsecond-scale dependency on real loopback sockets closes after
//! one break, though its probes pay for a fresh connection: one probe is one sample, and a slow
//! probe that answers is a successful one (the slow-call rule judges a window of calls once the
//! breaker is closed). Real time, because the sockets are real; every wait is bounded.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use stormguard_core::{BreakerSettings, Duration, State};
use stormguard_std::{Breaker, CallError, Metrics, Policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::support::ms;

/// A one-byte echo server on 127.0.0.1 that, while `down`, closes every connection it holds
/// or is offered.
async fn echo_server(down: Arc<AtomicBool>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let down = down.clone();
            tokio::spawn(async move {
                let mut byte = [0u8; 1];
                while !down.load(Ordering::Relaxed) {
                    if stream.read_exact(&mut byte).await.is_err()
                        || down.load(Ordering::Relaxed)
                        || stream.write_all(&byte).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A client keeping one connection open between calls, as a pool does, and opening a fresh one
/// when it has none; a fresh connection's first answer also takes at least `cold` (a cold
/// cache, a handshake), so that it is slow against the learned median.
struct Client {
    addr: std::net::SocketAddr,
    connection: Mutex<Option<TcpStream>>,
}

impl Client {
    async fn ask(&self, cold: StdDuration) -> Result<(), std::io::Error> {
        let start = StdInstant::now();
        let mut connection = self.connection.lock().await;
        let fresh = connection.is_none();
        if fresh {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            *connection = Some(stream);
        }
        let stream = connection.as_mut().unwrap();
        let mut byte = [7u8; 1];
        let answered = async {
            stream.write_all(&byte).await?;
            stream.read_exact(&mut byte).await?;
            Ok(())
        }
        .await;
        if answered.is_err() {
            *connection = None;
            return answered;
        }
        if fresh {
            // Busy, not a timer: a timer would round the wait up to a millisecond or more.
            while start.elapsed() < cold {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_dependency_whose_probes_pay_for_a_fresh_connection_closes_after_one_break() {
    let down = Arc::new(AtomicBool::new(false));
    let client = Client {
        addr: echo_server(down.clone()).await,
        connection: Mutex::new(None),
    };
    // The defaults but a short break, so that the run takes well under a second.
    let breaker = Breaker::new(
        BreakerSettings::builder("loopback")
            .break_duration(Duration::from_millis(100))
            .jitter(false)
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("loopback")
        .breaker(breaker.clone())
        .max_attempts(1)
        .no_budget()
        .build()
        .unwrap();
    let metrics = Metrics::for_policy(&policy);
    let policy = policy.with_listener(metrics.clone());
    let cold = StdDuration::from_micros(400);

    // Calls over the kept connection teach the breaker a loopback median.
    for _ in 0..200 {
        policy.call(|_| client.ask(cold)).await.unwrap();
    }
    let median = StdDuration::from(breaker.snapshot().normal_latency.expect("armed"));
    // Probes on a fresh connection: at least 400 us, and slow (past 3x) whatever the median
    // this machine measured.
    let cold = cold.max(median * 4);

    // An outage: every connection is closed, calls fail and the breaker opens.
    down.store(true, Ordering::Relaxed);
    while breaker.state() == State::Closed {
        let r = policy.call(|_| client.ask(cold)).await;
        assert!(matches!(r, Err(CallError::Failed(_))), "{r:?}");
    }
    assert_eq!(breaker.state(), State::Open);
    down.store(false, Ordering::Relaxed);

    // The dependency is back: every probe opens a fresh connection and answers slowly. Two
    // probe successes close the breaker after its first break; a slow probe re-opening it
    // would double the break again and again instead.
    let back = StdInstant::now();
    let until = back + StdDuration::from_secs(5);
    while breaker.state() != State::Closed {
        assert!(
            StdInstant::now() < until,
            "{} {:?}",
            breaker.state(),
            breaker.snapshot()
        );
        let _ = policy.call(|_| client.ask(cold)).await;
        tokio::time::sleep(ms(5)).await;
    }
    eprintln!(
        "median {median:?}, probes at least {cold:?}: closed {:?} after the dependency came back",
        back.elapsed()
    );
    let m = metrics.snapshot();
    assert_eq!(m.entered("open"), 1, "only the outage opened it: {m:?}");
    assert_eq!(breaker.snapshot().probes_in_flight, 0);

    // Closed, over the kept connection again: calls at the learned median keep it closed.
    for _ in 0..100 {
        policy.call(|_| client.ask(cold)).await.unwrap();
    }
    assert_eq!(breaker.state(), State::Closed, "{:?}", breaker.snapshot());
}
