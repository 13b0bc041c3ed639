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
//! Stopping waits out writers: a writer marks its thread slot busy (the
//! slots are static, never freed), checks that the trace it writes for
//! still runs, writes, and clears the mark; `stop` unpublishes the trace,
//! then waits for every mark to clear (`SeqCst` on both sides, so either
//! the writer sees the trace gone or `stop` sees the mark), and only then
//! reads and frees the rings. A write is two stores and a load on the
//! thread's own slot, and a clock read; nothing at all when no trace runs
//! (the hooks look at one word first).
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
    /// A shard's tiles ran (id: ranges claimed; a: its first tile; b:
    /// tiles run).
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

    /// Thread slots at most (threads past them record nothing; their
    /// events count as dropped).
    const MAX_SLOTS: usize = 256;

    /// One thread's slot. The slots are static (never freed), so a writer
    /// may mark its slot busy without first knowing whether the trace it
    /// writes for still runs; the rings they point to belong to the
    /// running trace and are freed by `stop` once no slot is busy.
    struct Ring {
        /// Set around each write (see the module docs).
        busy: AtomicBool,
        /// Claimed by a thread in the running trace (its name written).
        claimed: AtomicBool,
        /// Events written so far in this trace (the ring keeps the last
        /// `CAP`).
        written: AtomicU64,
        ring: AtomicPtr<Event>,
        name: std::cell::UnsafeCell<([u8; NAME], usize)>,
    }

    /// The slots, shareable: a slot's ring and name are written only by
    /// the thread that claimed it, and read by `stop` after the slot's
    /// last write (its `busy` cleared).
    struct Rings([Ring; MAX_SLOTS]);
    // SAFETY: as above.
    unsafe impl Sync for Rings {}

    static SLOTS: Rings = Rings(
        [const {
            Ring {
                busy: AtomicBool::new(false),
                claimed: AtomicBool::new(false),
                written: AtomicU64::new(0),
                ring: AtomicPtr::new(ptr::null_mut()),
                name: std::cell::UnsafeCell::new(([0; NAME], 0)),
            }
        }; MAX_SLOTS],
    );

    /// The running trace's serial; 0 when none runs.
    static RUNNING: AtomicU64 = AtomicU64::new(0);
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    /// The running trace's slots, ring size, start (on `EPOCH`), next free
    /// slot and events of threads that found none: set by `start` before
    /// it publishes `RUNNING`.
    static IN_USE: AtomicUsize = AtomicUsize::new(0);
    static CAP: AtomicUsize = AtomicUsize::new(0);
    static START: AtomicU64 = AtomicU64::new(0);
    static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
    static UNSLOTTED: AtomicU64 = AtomicU64::new(0);
    /// The rings of the running trace (owned here; start and stop only).
    static RINGS: std::sync::Mutex<Vec<Box<[Event]>>> = std::sync::Mutex::new(Vec::new());

    /// Task kind names seen (by pointer), so an event stores an index.
    static KIND_NAMES: [AtomicPtr<u8>; 32] = [const { AtomicPtr::new(ptr::null_mut()) }; 32];
    static KIND_LENS: [AtomicUsize; 32] = [const { AtomicUsize::new(0) }; 32];

    /// The time base of every event (a trace stores its start on it).
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

    fn clock() -> u64 {
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    std::thread_local! {
        /// (trace serial, slot index) of the calling thread; `usize::MAX`:
        /// no slot was free.
        static MINE: Cell<(u64, usize)> = const { Cell::new((0, usize::MAX)) };
    }

    /// A start time: `None` when no trace runs.
    #[derive(Clone, Copy)]
    pub(crate) struct Stamp(Option<u64>);

    #[inline]
    pub(crate) fn now() -> Stamp {
        if RUNNING.load(Ordering::Relaxed) == 0 {
            return Stamp(None);
        }
        Stamp(Some(clock()))
    }

    /// Writes one event (`make` gets the time now, on the `EPOCH` clock)
    /// on the calling thread's ring.
    #[inline]
    fn record(make: impl FnOnce(u64) -> Event) {
        let serial = RUNNING.load(Ordering::Relaxed);
        if serial != 0 {
            record_slow(serial, make);
        }
    }

    fn record_slow(serial: u64, make: impl FnOnce(u64) -> Event) {
        let (mine, index) = MINE.with(|m| m.get());
        let index = if mine == serial { index } else { claim(serial) };
        let Some(slot) = SLOTS.0.get(index) else {
            UNSLOTTED.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // SeqCst (this store and the load below): pairs with `stop`'s
        // SeqCst swap of `RUNNING` and its `busy` loads; store-then-load
        // on both sides, so at least one sees the other. The load also
        // acquires `start`'s setup (its SeqCst store).
        slot.busy.store(true, Ordering::SeqCst);
        // Still the running trace? (`stop` unpublishes it, then waits for
        // every `busy` to clear: one of us sees the other.)
        if RUNNING.load(Ordering::SeqCst) == serial {
            let mut e = make(clock());
            e.ts = e.ts.saturating_sub(START.load(Ordering::Relaxed));
            let cap = CAP.load(Ordering::Relaxed) as u64;
            let n = slot.written.load(Ordering::Relaxed);
            let ring = slot.ring.load(Ordering::Relaxed);
            // SAFETY: the ring of this slot in the running trace, `cap`
            // events long: `n % cap` is in bounds.
            let at = unsafe { ring.add((n % cap) as usize) };
            // SAFETY: the ring is alive until `stop` saw `busy` clear; only
            // the slot's thread writes it.
            unsafe { at.write(e) };
            // Release: pairs with `stop`'s Acquire load of `written`.
            slot.written.store(n + 1, Ordering::Release);
        }
        // Release: pairs with `stop`'s SeqCst `busy` loads: the ring's
        // events happen before `stop` reads them.
        slot.busy.store(false, Ordering::Release);
    }

    /// Claims a slot of trace `serial` for the calling thread (its index,
    /// or `usize::MAX` if none is free or the trace ended).
    #[cold]
    fn claim(serial: u64) -> usize {
        let index = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = SLOTS.0.get(index) else {
            MINE.with(|m| m.set((serial, usize::MAX)));
            return usize::MAX;
        };
        // SeqCst: pairs with `stop`'s swap and `busy` loads, as in
        // `record_slow` (store-then-load on both sides).
        slot.busy.store(true, Ordering::SeqCst);
        let ok = RUNNING.load(Ordering::SeqCst) == serial && index < IN_USE.load(Ordering::Relaxed);
        if ok {
            let current = std::thread::current();
            let name = current.name().unwrap_or("thread");
            // SAFETY: the slot is ours alone in this trace (the
            // `fetch_add` above), and `stop` reads it after `busy` clears.
            unsafe {
                let (buf, len) = &mut *slot.name.get();
                let n = name.len().min(NAME);
                buf[..n].copy_from_slice(&name.as_bytes()[..n]);
                *len = n;
            }
            slot.claimed.store(true, Ordering::Relaxed);
        }
        // Release: pairs with `stop`'s SeqCst `busy` loads: the name and
        // `claimed` (stored Relaxed) happen before `stop` reads them.
        slot.busy.store(false, Ordering::Release);
        let index = if ok { index } else { usize::MAX };
        MINE.with(|m| m.set((serial, index)));
        index
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
        if RUNNING.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Acquire: pairs with the Release store below; only compared here,
        // so nothing relies on it.
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
        // Acquire: pairs with another inserter's Release store below, which
        // the lock orders anyway; only nullness is used.
        let Some(i) = KIND_NAMES
            .iter()
            .position(|p| p.load(Ordering::Acquire).is_null())
        else {
            return 0;
        };
        KIND_LENS[i].store(name.len(), Ordering::Relaxed);
        // Release: pairs with the Acquire load in `stop`: the length, to
        // readers that load the pointer.
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
        let mut rings = RINGS.lock().unwrap_or_else(|p| p.into_inner());
        // Acquire: pairs with the store below and `stop`'s swap, all made
        // under this lock, which orders them anyway.
        if RUNNING.load(Ordering::Acquire) != 0 {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "start_trace: a trace is already recording in this process",
            ));
        }
        let n = threads.clamp(1, MAX_SLOTS);
        *rings = (0..n)
            .map(|_| vec![Event::default(); events_per_thread].into_boxed_slice())
            .collect();
        for (slot, ring) in SLOTS.0.iter().zip(rings.iter_mut()) {
            slot.ring.store(ring.as_mut_ptr(), Ordering::Relaxed);
            slot.written.store(0, Ordering::Relaxed);
            slot.claimed.store(false, Ordering::Relaxed);
        }
        IN_USE.store(n, Ordering::Relaxed);
        CAP.store(events_per_thread, Ordering::Relaxed);
        NEXT_SLOT.store(0, Ordering::Relaxed);
        UNSLOTTED.store(0, Ordering::Relaxed);
        START.store(clock(), Ordering::Relaxed);
        // Pairs with the writers' SeqCst loads in `record_slow` and `claim`:
        // publishes everything above to them.
        RUNNING.store(SERIAL.fetch_add(1, Ordering::Relaxed), Ordering::SeqCst);
        Ok(())
    }

    /// Stops recording and collects the events (see
    /// [`crate::Device::stop_trace`]).
    pub(crate) fn stop() -> Result<Trace, Error> {
        let mut rings = RINGS.lock().unwrap_or_else(|p| p.into_inner());
        // SeqCst: pairs with the writers' SeqCst `busy` stores and
        // `RUNNING` loads (`record_slow`, `claim`).
        if RUNNING.swap(0, Ordering::SeqCst) == 0 {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "stop_trace: no trace is recording",
            ));
        }
        // Wait out the writers that saw the trace running (module docs).
        // SeqCst: pairs with the writers' `busy` stores and `RUNNING` loads
        // as the swap above; also acquires their Release clears of `busy`.
        for slot in SLOTS.0.iter() {
            while slot.busy.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
        let cap = CAP.load(Ordering::Relaxed) as u64;
        let mut threads = Vec::new();
        let mut dropped = UNSLOTTED.load(Ordering::Relaxed);
        for (tid, (slot, ring)) in SLOTS.0.iter().zip(rings.iter()).enumerate() {
            // Acquire: `claimed` pairs with no Release (stored Relaxed in
            // `claim`; the `busy` wait above ordered it); `written` pairs
            // with `record_slow`'s Release store.
            if !slot.claimed.load(Ordering::Acquire) {
                continue;
            }
            let n = slot.written.load(Ordering::Acquire);
            let first = n.saturating_sub(cap);
            dropped += first;
            let events: Vec<Event> = (first..n).map(|k| ring[(k % cap) as usize]).collect();
            // SAFETY: written by the slot's thread before its last `busy`
            // clear, which the wait above saw.
            let (buf, len) = unsafe { *slot.name.get() };
            threads.push(ThreadTrace {
                tid: tid as u64 + 1,
                name: String::from_utf8_lossy(&buf[..len]).into_owned(),
                events,
            });
        }
        for slot in SLOTS.0.iter() {
            slot.ring.store(ptr::null_mut(), Ordering::Relaxed);
        }
        rings.clear();
        let kinds = KIND_NAMES
            .iter()
            .zip(&KIND_LENS)
            .map_while(|(p, l)| {
                // Acquire: pairs with `task_kind`'s Release store (the length).
                let p = p.load(Ordering::Acquire);
                (!p.is_null()).then(|| {
                    // SAFETY: a `&'static str`'s pointer and length.
                    let bytes = unsafe { std::slice::from_raw_parts(p, l.load(Ordering::Relaxed)) };
                    // SAFETY: the bytes of a `&'static str`: UTF-8.
                    unsafe { std::str::from_utf8_unchecked(bytes) }
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
                            write!(out, "\"args\":{{\"id\":\"{:#x}\"", e.id)?;
                            write_args(&mut out, e)?;
                            write!(out, "}}}}")?;
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

    /// An event's fields under their names for its kind.
    fn write_args(out: &mut impl Write, e: &Event) -> io::Result<()> {
        let k = e.kind;
        if k == Kind::Submit as u8 {
            write!(
                out,
                ",\"queue\":\"{:#x}\",\"waits\":{},\"signals\":{}",
                e.a,
                e.b >> 32,
                e.b & 0xffff_ffff
            )
        } else if k == Kind::Ready as u8 || k == Kind::Issue as u8 {
            write!(out, ",\"queue\":\"{:#x}\"", e.a)
        } else if k == Kind::Complete as u8 {
            write!(out, ",\"queue\":\"{:#x}\",\"failed\":{}", e.a, e.b != 0)
        } else if k == Kind::Task as u8 {
            write!(out, ",\"scope\":\"{:#x}\"", e.a)
        } else if k == Kind::Tiles as u8 {
            write!(
                out,
                ",\"ranges\":{},\"first_tile\":{},\"tiles\":{}",
                e.id, e.a, e.b
            )
        } else if k == Kind::HostCall as u8 {
            write!(out, ",\"failed\":{}", e.b != 0)
        } else if k == Kind::Signal as u8 {
            write!(out, ",\"value\":{},\"failed\":{}", e.a, e.b != 0)
        } else if k == Kind::Park as u8 {
            write!(out, ",\"worker\":{}", e.a)
        } else if k == Kind::Steal as u8 {
            write!(out, ",\"victim\":{}", e.a)
        } else {
            Ok(())
        }
    }

    fn escape(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if (c as u32) < 0x20 => out.push(' '),
                c => out.push(c),
            }
        }
        out
    }
}
