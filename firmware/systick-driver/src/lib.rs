//! An embassy time driver on the Cortex-M SysTick: one interrupt per millisecond (1 kHz ticks),
//! a 64-bit tick count, and embassy-time-queue-utils' timer queue. About fifty lines, as
//! EMBEDDED.md describes; enough for QEMU's lm3s6965evb and mps2-an386 and for size probes.
//!
//! Call [`init`] once, early in `main`, with the core clock frequency.
#![no_std]

use core::cell::RefCell;
use core::task::Waker;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use cortex_m_rt::exception;
use critical_section::Mutex;
use embassy_time_driver::Driver;
use embassy_time_queue_utils::Queue;

struct State {
    /// Milliseconds since [`init`].
    ticks: u64,
    /// The tick at which the queue next has a timer to fire.
    alarm: u64,
    queue: Queue,
}

struct SysTickDriver {
    state: Mutex<RefCell<State>>,
}

embassy_time_driver::time_driver_impl!(static DRIVER: SysTickDriver = SysTickDriver {
    state: Mutex::new(RefCell::new(State { ticks: 0, alarm: u64::MAX, queue: Queue::new() })),
});

impl Driver for SysTickDriver {
    fn now(&self) -> u64 {
        critical_section::with(|cs| self.state.borrow_ref(cs).ticks)
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        critical_section::with(|cs| {
            let mut s = self.state.borrow_ref_mut(cs);
            if s.queue.schedule_wake(at, waker) {
                let now = s.ticks;
                s.alarm = s.queue.next_expiration(now);
            }
        });
    }
}

/// Starts SysTick at 1 kHz from the core clock (`core_hz`: 12 MHz on QEMU's lm3s6965evb,
/// 25 MHz on mps2-an386).
pub fn init(mut syst: SYST, core_hz: u32) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(core_hz / 1_000 - 1);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
    // The handle is not needed again: the driver only reacts to the interrupt.
    core::mem::forget(syst);
}

#[exception]
fn SysTick() {
    critical_section::with(|cs| {
        let mut s = DRIVER.state.borrow_ref_mut(cs);
        s.ticks += 1;
        if s.ticks >= s.alarm {
            let now = s.ticks;
            s.alarm = s.queue.next_expiration(now);
        }
    });
}
