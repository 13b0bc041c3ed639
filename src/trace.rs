//! A timeline of what the scheduler did (feature `trace`): submissions,
//! issues and completions of queue actions, task runs, dispatch ranges,
//! host calls, semaphore signals and failures, worker parks and steals,
//! written out in the Chrome trace event format (Perfetto,
//! chrome://tracing).
//!
//! Recording takes no lock and allocates nothing: [`Device::start_trace`]
//! allocates one ring of `events_per_thread` events per thread slot up
//! front; a thread claims a slot (one CAS) at its first event, then
//! writes its own ring with plain stores. A full ring overwrites its
//! oldest events and counts them as dropped. One trace runs at a time in
//! a process (it records every device's work).
//!
//! Stopping waits out writers: a writer counts itself in (one RMW on a
//! process-wide counter), checks the trace is still the running one,
//! writes, and counts itself out; `stop` unpublishes the trace, then waits
//! for the count to reach zero (`SeqCst` on both sides, so either the
//! writer sees the trace gone or `stop` sees the writer). That costs two
//! read-modify-writes per event while a trace records, none otherwise
//! (the hooks look at one pointer first).
//!
//! Without the feature every hook below is an empty inline function.
//!
//! [`Device::start_trace`]: crate::Device::start_trace

#[cfg(feature = "trace")]
pub use imp::*;

#[cfg(not(feature = "trace"))]
pub(crate) use off::*;

/// What an event records (its name in the trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[cfg_attr(not(feature = "trace"), allow(dead_code))]
pub(crate) enum Kind {
    /// `PendingQueue::submit` (id: action; a: queue; b: waits << 32 | signals).
    Submit,
    /// An action's waits are met (id: action; a: queue).
    Ready,
    /// An action handed to its backend (id: action; a: queue).
    Issue,
    /// An action finished: its signals made (id: action; a: queue; b: 0 ok, 1 failed).
    Complete,
    /// A task ran (id: task; a: scope; b: kind name index).
    Task,
    /// A dispatch range ran (a: first tile; b: end tile).
    Tiles,
    /// A host call ran (id: action-less call).
    HostCall,
    /// A semaphore was signalled (id: semaphore; a: value).
    Signal,
    /// A semaphore failed (id: semaphore).
    Fail,
    /// A worker parked until woken (a: worker index).
    Park,
    /// A worker stole from another's deque (a: victim).
    Steal,
}

#[cfg(not(feature = "trace"))]
mod off {
    use super::Kind;

    /// A start time (nothing, without the feature).
    #[derive(Clone, Copy)]
    pub(crate) struct Stamp;

    #[inline(always)]
    pub(crate) fn now() -> Stamp {
        Stamp
    }

    #[inline(always)]
    pub(crate) fn span(_kind: Kind, _start: Stamp, _id: u64, _a: u64, _b: u64) {}

    #[inline(always)]
    pub(crate) fn instant(_kind: Kind, _id: u64, _a: u64, _b: u64) {}

    #[inline(always)]
    pub(crate) fn flow_out(_id: u64) {}

    #[inline(always)]
    pub(crate) fn flow_in(_id: u64) {}

    #[inline(always)]
    pub(crate) fn task_kind(_name: &'static str) -> u64 {
        0
    }
}

#[cfg(feature = "trace")]
mod imp {
    use std::cell::Cell;
    use std::io::{self, Write};
    use std::ptr;
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
    use std::time::Instant;

    use super::Kind;
    use crate::error::{Error, ErrorKind};

    /// Bytes of a thread's name kept.
    const NAME: usize = 40;

    #[derive(Clone, Copy, Default)]
    #[repr(C)]
    struct Event {
        /// Nanoseconds since the trace started.
        ts: u64,
        /// Duration (spans), 0 otherwise.
        dur: u64,
        id: u64,
        a: u64,
        b: u64,
        kind: u8,
        phase: u8,
    }

    const INSTANT: u8 = 0;
    const SPAN: u8 = 1;
    const FLOW_OUT: u8 = 2;
    const FLOW_IN: u8 = 3;

    /// One thread's ring.
    struct Slot {
        /// Claimed by a thread (its name written).
        claimed: AtomicBool,
        /// Events written so far (the ring holds the last `len`).
        written: AtomicU64,
        ring: Box<[std::cell::UnsafeCell<Event>]>,
        name: std::cell::UnsafeCell<([u8; NAME], usize)>,
    }

    /// A running trace.
    struct Session {
        /// Nanoseconds from `EPOCH` to the start.
        start: u64,
        slots: Box<[Slot]>,
        next_slot: AtomicUsize,
        /// Events of threads that found no free slot.
        unslotted: AtomicU64,
        /// Which trace this is (threads cache their slot per trace).
        serial: u64,
    }

    // SAFETY: each ring is written by the one thread that claimed its slot,
    // and read only after `stop` waited every writer out.
    unsafe impl Sync for Session {}
    // SAFETY: as above.
    unsafe impl Send for Session {}

    /// Task kind names seen (by pointer), so an event stores an index.
    static KIND_NAMES: [AtomicPtr<u8>; 32] = [const { AtomicPtr::new(ptr::null_mut()) }; 32];
    static KIND_LENS: [AtomicUsize; 32] = [const { AtomicUsize::new(0) }; 32];

    /// Threads inside `record` (see the module docs).
    static WRITERS: AtomicUsize = AtomicUsize::new(0);
    /// The time base of every event (a session stores its start on it).
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

    fn clock() -> u64 {
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    static ACTIVE: AtomicPtr<Session> = AtomicPtr::new(ptr::null_mut());
    static SERIAL: AtomicU64 = AtomicU64::new(1);

    std::thread_local! {
        /// (trace serial, slot index) of the calling thread.
        static MINE: Cell<(u64, usize)> = const { Cell::new((0, usize::MAX)) };
    }

    /// A start time: `None` when no trace runs.
    #[derive(Clone, Copy)]
    pub(crate) struct Stamp(Option<u64>);

    #[inline]
    pub(crate) fn now() -> Stamp {
        if ACTIVE.load(Ordering::Relaxed).is_null() {
            return Stamp(None);
        }
        Stamp(Some(clock()))
    }

    /// Writes one event (its `ts` on the `EPOCH` clock; `now` given) on
    /// the calling thread's ring.
    #[inline]
    fn record(make: impl FnOnce(u64) -> Event) {
        if ACTIVE.load(Ordering::Relaxed).is_null() {
            return;
        }
        record_slow(make);
    }

    fn record_slow(make: impl FnOnce(u64) -> Event) {
        WRITERS.fetch_add(1, Ordering::SeqCst);
        let p = ACTIVE.load(Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: published, and `stop` frees it only once `WRITERS`
            // is back to zero, which our count prevents.
            let s = unsafe { &*p };
            match my_slot(s) {
                Some(slot) => {
                    let mut e = make(clock());
                    e.ts = e.ts.saturating_sub(s.start);
                    let n = slot.written.load(Ordering::Relaxed);
                    let i = (n % slot.ring.len() as u64) as usize;
                    // SAFETY: only the slot's thread writes its ring;
                    // `stop` reads it after every writer left.
                    unsafe { *slot.ring[i].get() = e };
                    slot.written.store(n + 1, Ordering::Release);
                }
                None => {
                    s.unslotted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        WRITERS.fetch_sub(1, Ordering::SeqCst);
    }

    fn my_slot(s: &Session) -> Option<&Slot> {
        let (serial, index) = MINE.with(|m| m.get());
        if serial == s.serial {
            return s.slots.get(index);
        }
        let index = s.next_slot.fetch_add(1, Ordering::Relaxed);
        MINE.with(|m| m.set((s.serial, index)));
        let slot = s.slots.get(index)?;
        let current = std::thread::current();
        let name = current.name().unwrap_or("thread");
        // SAFETY: the slot is ours alone from the `fetch_add` above; the
        // name is read after `stop` (through `claimed`'s release).
        unsafe {
            let (buf, len) = &mut *slot.name.get();
            let n = name.len().min(NAME);
            buf[..n].copy_from_slice(&name.as_bytes()[..n]);
            *len = n;
        }
        slot.claimed.store(true, Ordering::Release);
        Some(slot)
    }

    /// A span from `start` to now.
    #[inline]
    pub(crate) fn span(kind: Kind, start: Stamp, id: u64, a: u64, b: u64) {
        let Stamp(Some(t0)) = start else { return };
        record(|ts| Event {
            ts: t0,
            dur: ts.saturating_sub(t0),
            id,
            a,
            b,
            kind: kind as u8,
            phase: SPAN,
        });
    }

    #[inline]
    pub(crate) fn instant(kind: Kind, id: u64, a: u64, b: u64) {
        record(|ts| Event {
            ts,
            dur: 0,
            id,
            a,
            b,
            kind: kind as u8,
            phase: INSTANT,
        });
    }

    /// The start of a flow arrow (a submission, a signal) with id `id`.
    #[inline]
    pub(crate) fn flow_out(id: u64) {
        record(|ts| Event {
            ts,
            id,
            phase: FLOW_OUT,
            ..Event::default()
        });
    }

    /// The end of a flow arrow (an issue, an action readied).
    #[inline]
    pub(crate) fn flow_in(id: u64) {
        record(|ts| Event {
            ts,
            id,
            phase: FLOW_IN,
            ..Event::default()
        });
    }

    /// The index of a task kind's name (stored in its events).
    pub(crate) fn task_kind(name: &'static str) -> u64 {
        if ACTIVE.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        let find = || {
            KIND_NAMES
                .iter()
                .position(|p| p.load(Ordering::Acquire) == name.as_ptr().cast_mut())
        };
        if let Some(i) = find() {
            return i as u64;
        }
        // A kind seen for the first time (once per kind and process).
        static INSERT: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = INSERT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = find() {
            return i as u64;
        }
        let Some(i) = KIND_NAMES
            .iter()
            .position(|p| p.load(Ordering::Acquire).is_null())
        else {
            return 0;
        };
        KIND_LENS[i].store(name.len(), Ordering::Relaxed);
        // Release: the length, to readers that load the pointer.
        KIND_NAMES[i].store(name.as_ptr().cast_mut(), Ordering::Release);
        i as u64
    }

    /// Starts recording with `threads` thread slots (see
    /// [`crate::Device::start_trace`]).
    pub(crate) fn start(events_per_thread: usize, threads: usize) -> Result<(), Error> {
        if events_per_thread == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "start_trace: events_per_thread must be at least 1",
            ));
        }
        if !ACTIVE.load(Ordering::Acquire).is_null() {
            return Err(already());
        }
        let slots = (0..threads)
            .map(|_| Slot {
                claimed: AtomicBool::new(false),
                written: AtomicU64::new(0),
                ring: (0..events_per_thread)
                    .map(|_| std::cell::UnsafeCell::new(Event::default()))
                    .collect(),
                name: std::cell::UnsafeCell::new(([0; NAME], 0)),
            })
            .collect();
        let session = Box::into_raw(Box::new(Session {
            start: clock(),
            slots,
            next_slot: AtomicUsize::new(0),
            unslotted: AtomicU64::new(0),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }));
        if ACTIVE
            .compare_exchange(
                ptr::null_mut(),
                session,
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // SAFETY: never published: still ours.
            drop(unsafe { Box::from_raw(session) });
            return Err(already());
        }
        Ok(())
    }

    fn already() -> Error {
        Error::new(
            ErrorKind::FailedPrecondition,
            "start_trace: a trace is already recording in this process",
        )
    }

    /// Stops recording and collects the events (see
    /// [`crate::Device::stop_trace`]).
    pub(crate) fn stop() -> Result<Trace, Error> {
        let p = ACTIVE.swap(ptr::null_mut(), Ordering::SeqCst);
        if p.is_null() {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "stop_trace: no trace is recording",
            ));
        }
        // Wait out writers that saw it published (module docs).
        while WRITERS.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: unpublished, and no writer is left: ours alone.
        let s = unsafe { Box::from_raw(p) };
        let mut threads = Vec::new();
        let mut dropped = s.unslotted.load(Ordering::Relaxed);
        for (tid, slot) in s.slots.iter().enumerate() {
            if !slot.claimed.load(Ordering::Acquire) {
                continue;
            }
            let n = slot.written.load(Ordering::Acquire);
            let cap = slot.ring.len() as u64;
            let first = n.saturating_sub(cap);
            dropped += first;
            // SAFETY: no writer is left (waited above).
            let events: Vec<Event> = (first..n)
                .map(|k| unsafe { *slot.ring[(k % cap) as usize].get() })
                .collect();
            // SAFETY: as above.
            let (buf, len) = unsafe { *slot.name.get() };
            let name = String::from_utf8_lossy(&buf[..len]).into_owned();
            threads.push(ThreadTrace {
                tid: tid as u64 + 1,
                name,
                events,
            });
        }
        let kinds = KIND_NAMES
            .iter()
            .zip(&KIND_LENS)
            .map_while(|(p, l)| {
                let p = p.load(Ordering::Acquire);
                // SAFETY: a `&'static str`'s pointer and length.
                (!p.is_null()).then(|| unsafe {
                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                        p,
                        l.load(Ordering::Relaxed),
                    ))
                })
            })
            .collect();
        Ok(Trace {
            threads,
            dropped,
            kinds,
        })
    }

    struct ThreadTrace {
        tid: u64,
        name: String,
        events: Vec<Event>,
    }

    /// A recorded timeline ([`crate::Device::stop_trace`]).
    pub struct Trace {
        threads: Vec<ThreadTrace>,
        dropped: u64,
        kinds: Vec<&'static str>,
    }

    impl std::fmt::Debug for Trace {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Trace")
                .field("threads", &self.threads.len())
                .field("events", &self.events())
                .field("dropped", &self.dropped)
                .finish()
        }
    }

    fn kind_name(k: u8) -> &'static str {
        match k {
            x if x == Kind::Submit as u8 => "submit",
            x if x == Kind::Ready as u8 => "ready",
            x if x == Kind::Issue as u8 => "issue",
            x if x == Kind::Complete as u8 => "complete",
            x if x == Kind::Task as u8 => "task",
            x if x == Kind::Tiles as u8 => "tiles",
            x if x == Kind::HostCall as u8 => "host call",
            x if x == Kind::Signal as u8 => "signal",
            x if x == Kind::Fail as u8 => "fail",
            x if x == Kind::Park as u8 => "park",
            x if x == Kind::Steal as u8 => "steal",
            _ => "event",
        }
    }

    impl Trace {
        /// Events kept (over every thread).
        pub fn events(&self) -> usize {
            self.threads.iter().map(|t| t.events.len()).sum()
        }

        /// Events lost: overwritten in a full ring (the oldest go first),
        /// or from threads beyond the trace's thread slots.
        pub fn dropped(&self) -> u64 {
            self.dropped
        }

        /// Writes the trace in the Chrome trace event format
        /// (`{"traceEvents": [...]}`: one complete (`X`) event per span,
        /// instant (`i`) events, flow arrows (`s`/`f`) from each
        /// submission to its issue and from a signal to the actions it
        /// readied, and thread names), which Perfetto (ui.perfetto.dev)
        /// and chrome://tracing open.
        ///
        /// # Errors
        ///
        /// The writer's errors.
        pub fn write_chrome_json(&self, out: &mut impl Write) -> io::Result<()> {
            let mut out = io::BufWriter::new(out);
            write!(out, "{{\"traceEvents\":[")?;
            let mut first = true;
            let mut sep = |out: &mut io::BufWriter<_>| -> io::Result<()> {
                if !std::mem::take(&mut first) {
                    write!(out, ",")?;
                }
                writeln!(out)
            };
            for t in &self.threads {
                sep(&mut out)?;
                write!(
                    out,
                    "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                    t.tid,
                    escape(&t.name)
                )?;
                for e in &t.events {
                    sep(&mut out)?;
                    let ts = e.ts as f64 / 1000.0;
                    match e.phase {
                        SPAN | INSTANT => {
                            let mut name = kind_name(e.kind);
                            if e.kind == Kind::Task as u8 {
                                name = self.kinds.get(e.b as usize).copied().unwrap_or("task");
                            }
                            if e.phase == SPAN {
                                write!(
                                    out,
                                    "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"fenceline\",\"pid\":1,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},",
                                    escape(name),
                                    t.tid,
                                    ts,
                                    e.dur as f64 / 1000.0
                                )?;
                            } else {
                                write!(
                                    out,
                                    "{{\"ph\":\"i\",\"s\":\"t\",\"name\":\"{}\",\"cat\":\"fenceline\",\"pid\":1,\"tid\":{},\"ts\":{:.3},",
                                    escape(name),
                                    t.tid,
                                    ts
                                )?;
                            }
                            write!(
                                out,
                                "\"args\":{{\"id\":\"{:#x}\",\"a\":{},\"b\":{}}}}}",
                                e.id, e.a, e.b
                            )?;
                        }
                        FLOW_OUT | FLOW_IN => {
                            write!(
                                out,
                                "{{\"ph\":\"{}\",\"name\":\"flow\",\"cat\":\"fenceline\",\"id\":\"{:#x}\",\"pid\":1,\"tid\":{},\"ts\":{:.3}{}}}",
                                if e.phase == FLOW_OUT { "s" } else { "f" },
                                e.id,
                                t.tid,
                                ts,
                                if e.phase == FLOW_IN { ",\"bp\":\"e\"" } else { "" }
                            )?;
                        }
                        _ => {}
                    }
                }
            }
            writeln!(
                out,
                "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"dropped_events\":{}}}}}",
                self.dropped
            )?;
            out.flush()
        }
    }

    fn escape(s: &str) -> String {
        s.chars()
            .flat_map(|c| match c {
                '"' => vec!['\\', '"'],
                '\\' => vec!['\\', '\\'],
                c if (c as u32) < 0x20 => vec![' '],
                c => vec![c],
            })
            .collect()
    }
}
