//! Test doubles for your own tests: an operation that answers from a script, and a listener
//! that records what a policy said.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use stormguard_std::testing::{EventRecorder, Script};
//! use stormguard_std::Policy;
//!
//! // Fails twice (the second time slowly), then answers.
//! let script = Script::new([Err("refused"), Err("reset")])
//!     .then_after(Duration::from_millis(30), Ok(42));
//! let recorder = EventRecorder::new();
//! let policy = Policy::builder("ledger")
//!     .no_budget()
//!     .listener(recorder.clone())
//!     .build()?;
//! assert_eq!(policy.call(|_| script.next()).await, Ok(42));
//! assert_eq!(script.calls(), 3);
//! assert_eq!(recorder.count("retry"), 2);
//! assert_eq!(recorder.calls(), [(3, stormguard_std::events::Ended::Succeeded)]);
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use stormguard_core::{Event, Name, RefusalReason, State};

use crate::events::{Ended, Listener};

/// `mutex` locked; a test that panicked while holding it left the contents as they were.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One scripted answer, and how long it takes.
#[derive(Clone, Debug)]
struct Line<T, E> {
    after: Duration,
    answer: Result<T, E>,
}

#[derive(Debug)]
struct Lines<T, E> {
    lines: VecDeque<Line<T, E>>,
    calls: u64,
}

/// An operation that answers from a script, one line per call, in order; past its end it
/// repeats its last line (a script ending in a success stays healthy). Clones share the script
/// and the count of calls, so a clone can go into the operation and the original be asked
/// afterwards.
#[derive(Debug)]
pub struct Script<T, E> {
    lines: Arc<Mutex<Lines<T, E>>>,
}

impl<T, E> Clone for Script<T, E> {
    fn clone(&self) -> Self {
        Script {
            lines: Arc::clone(&self.lines),
        }
    }
}

impl<T: Clone, E: Clone> Script<T, E> {
    /// A script of immediate answers.
    pub fn new(answers: impl IntoIterator<Item = Result<T, E>>) -> Script<T, E> {
        let lines = answers
            .into_iter()
            .map(|answer| Line {
                after: Duration::ZERO,
                answer,
            })
            .collect();
        Script {
            lines: Arc::new(Mutex::new(Lines { lines, calls: 0 })),
        }
    }

    /// Adds `answer` to the end of the script.
    #[must_use]
    pub fn then(self, answer: Result<T, E>) -> Script<T, E> {
        self.then_after(Duration::ZERO, answer)
    }

    /// Adds `answer` to the end of the script, given `after` that long (on tokio's timer, which
    /// a paused-time test moves on at once; [`Script::next_blocking`] sleeps the thread).
    #[must_use]
    pub fn then_after(self, after: Duration, answer: Result<T, E>) -> Script<T, E> {
        self.lock().lines.push_back(Line { after, answer });
        self
    }

    fn lock(&self) -> MutexGuard<'_, Lines<T, E>> {
        locked(&self.lines)
    }

    /// The next line: taken off the script, or the last one again past its end.
    fn take(&self) -> Option<Line<T, E>> {
        let mut lines = self.lock();
        lines.calls = lines.calls.saturating_add(1);
        if lines.lines.len() > 1 {
            lines.lines.pop_front()
        } else {
            lines.lines.front().cloned()
        }
    }

    /// The next answer, as an attempt of `policy.call` (`|_| script.next()`), taken off the
    /// script when the attempt is first polled (an attempt never run asks for nothing). An
    /// empty script never answers: the attempt runs until the policy's attempt timeout cuts it.
    #[cfg(feature = "tokio")]
    pub fn next(&self) -> impl std::future::Future<Output = Result<T, E>> {
        let script = self.clone();
        async move {
            let Some(line) = script.take() else {
                return std::future::pending().await;
            };
            if !line.after.is_zero() {
                ::tokio::time::sleep(line.after).await;
            }
            line.answer
        }
    }

    /// The next answer, for a blocking operation; `None` from an empty script.
    pub fn next_blocking(&self) -> Option<Result<T, E>> {
        let line = self.take()?;
        if !line.after.is_zero() {
            std::thread::sleep(line.after);
        }
        Some(line.answer)
    }

    /// How many answers have been asked for.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Lines not yet answered (the last line, repeated past the end, counts as one).
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.lock().lines.len()
    }
}

/// One recorded event, owned: the kind ([`Event::kind`]), the name it carried, and the fields a
/// test most often asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The event's kind (`state_changed`, `rejected`, `retry`, ...).
    pub kind: &'static str,
    /// The name it carried.
    pub name: String,
    /// For a state change: from and to.
    pub states: Option<(State, State)>,
    /// For a rejection: why.
    pub refusal: Option<RefusalReason>,
    /// For a retry: the attempt about to be made.
    pub attempt: Option<u32>,
    /// The event as `Debug` prints it, for anything else.
    pub text: String,
}

/// A [`Listener`] recording every event a policy (or breaker) sends, and how each call ended,
/// for a test to read back. Clones share the record.
#[derive(Clone, Debug, Default)]
pub struct EventRecorder {
    seen: Arc<Mutex<Vec<Recorded>>>,
    calls: Arc<Mutex<Vec<(u32, Ended)>>>,
}

impl EventRecorder {
    /// An empty recorder.
    #[must_use]
    pub fn new() -> EventRecorder {
        EventRecorder::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Recorded>> {
        locked(&self.seen)
    }

    /// Every event so far, in order.
    #[must_use]
    pub fn events(&self) -> Vec<Recorded> {
        self.lock().clone()
    }

    /// How many events of `kind` so far.
    #[must_use]
    pub fn count(&self, kind: &str) -> usize {
        self.lock().iter().filter(|e| e.kind == kind).count()
    }

    /// The state changes so far, in order.
    #[must_use]
    pub fn state_changes(&self) -> Vec<(State, State)> {
        self.lock().iter().filter_map(|e| e.states).collect()
    }

    /// The reasons of the rejections so far, in order.
    #[must_use]
    pub fn refusals(&self) -> Vec<RefusalReason> {
        self.lock().iter().filter_map(|e| e.refusal).collect()
    }

    /// How each call ended so far, with its attempts, in order.
    #[must_use]
    pub fn calls(&self) -> Vec<(u32, Ended)> {
        locked(&self.calls).clone()
    }

    /// Forgets everything recorded.
    pub fn clear(&self) {
        self.lock().clear();
        locked(&self.calls).clear();
    }
}

impl Listener for EventRecorder {
    fn on_event(&self, event: &Event<'_>) {
        let recorded = Recorded {
            kind: event.kind(),
            name: event.name().as_str().to_string(),
            states: match *event {
                Event::StateChanged { from, to, .. } => Some((from, to)),
                _ => None,
            },
            refusal: match *event {
                Event::Rejected { reason, .. } => Some(reason),
                _ => None,
            },
            attempt: match *event {
                Event::Retry { attempt, .. } => Some(attempt),
                _ => None,
            },
            text: format!("{event:?}"),
        };
        self.lock().push(recorded);
    }

    fn on_call(&self, _: &Name, attempts: u32, ended: Ended) {
        locked(&self.calls).push((attempts, ended));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_answers_in_order_then_repeats_its_last_line() {
        let script = Script::new([Err("a"), Ok(1)]).then(Ok(2));
        assert_eq!(script.next_blocking(), Some(Err("a")));
        assert_eq!(script.next_blocking(), Some(Ok(1)));
        assert_eq!(script.next_blocking(), Some(Ok(2)));
        assert_eq!(script.next_blocking(), Some(Ok(2)));
        assert_eq!(script.calls(), 4);
        assert_eq!(script.remaining(), 1);
        let empty: Script<u8, ()> = Script::new([]);
        assert_eq!(empty.next_blocking(), None);
    }
}
