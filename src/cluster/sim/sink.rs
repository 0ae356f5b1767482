//! Where timeline events go as they happen.
//!
//! The driver hands every [`TimelineEvent`] to each [`EventSink`] given to [`super::SimulationBuilder::sink`]
//! the moment it is logged, so a long run's timeline is written while it runs instead of being
//! kept in memory until the end. The events are structured values; a sink decides how to show
//! them:
//!
//! - [`TextSink`]: the human timeline, one [`TimelineEvent::line`] per event;
//! - [`JsonLinesSink`]: one JSON object per line (`serde_json` of the event);
//! - [`Collect`]: keeps the events in a `Vec`, for tests and for reports built after the run.
//!
//! A sink that must be read after the run (a collector, or the writer `nfsim run` also prints
//! conntrack dumps and the summary to) is shared: `Rc<RefCell<S>>` is itself a sink, so keep a
//! clone of the `Rc` and hand the other one to the builder.
//!
//! The first write error stops the run: [`super::Simulation::run_until`] returns
//! [`super::SimError::Output`] with the error's kind (a closed pipe is
//! [`std::io::ErrorKind::BrokenPipe`]).

use super::TimelineEvent;
use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

/// Receives the timeline's events, in order, as they happen.
pub trait EventSink {
    /// One event.
    fn event(&mut self, e: &TimelineEvent) -> io::Result<()>;
    /// The run is over (or stopped): write out whatever is buffered.
    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: EventSink + ?Sized> EventSink for Box<S> {
    fn event(&mut self, e: &TimelineEvent) -> io::Result<()> {
        (**self).event(e)
    }
    fn finish(&mut self) -> io::Result<()> {
        (**self).finish()
    }
}

impl<S: EventSink + ?Sized> EventSink for Rc<RefCell<S>> {
    fn event(&mut self, e: &TimelineEvent) -> io::Result<()> {
        self.borrow_mut().event(e)
    }
    fn finish(&mut self) -> io::Result<()> {
        self.borrow_mut().finish()
    }
}

/// The human timeline: `HH:MM:SS.mmm  what happened`, one line per event.
#[derive(Debug)]
pub struct TextSink<W: Write> {
    out: W,
}

impl<W: Write> TextSink<W> {
    /// Writes to `out` (buffer it: a `BufWriter` around stdout or a file).
    pub fn new(out: W) -> TextSink<W> {
        TextSink { out }
    }
    /// The writer, to put other text between events (a conntrack dump, the summary).
    pub fn writer(&mut self) -> &mut W {
        &mut self.out
    }
    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> EventSink for TextSink<W> {
    fn event(&mut self, e: &TimelineEvent) -> io::Result<()> {
        self.out.write_all(e.line().as_bytes())?;
        self.out.write_all(b"\n")
    }
    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// JSON lines: each event as one JSON object (`{"t_ns":…,"time":…,"kind":…,…}`) and a newline.
#[derive(Debug)]
pub struct JsonLinesSink<W: Write> {
    out: W,
}

impl<W: Write> JsonLinesSink<W> {
    /// Writes to `out` (buffer it).
    pub fn new(out: W) -> JsonLinesSink<W> {
        JsonLinesSink { out }
    }
    /// The writer, to add records of other kinds (the run's verdict at the end).
    pub fn writer(&mut self) -> &mut W {
        &mut self.out
    }
    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> EventSink for JsonLinesSink<W> {
    fn event(&mut self, e: &TimelineEvent) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, e)?;
        self.out.write_all(b"\n")
    }
    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Keeps every event (memory grows with the run: for tests and short runs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collect {
    /// The events so far, in order.
    pub events: Vec<TimelineEvent>,
}

impl EventSink for Collect {
    fn event(&mut self, e: &TimelineEvent) -> io::Result<()> {
        self.events.push(e.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::What;
    use super::*;

    fn ev(t: u64) -> TimelineEvent {
        TimelineEvent {
            t_ns: t,
            time: "00:00:00.000".into(),
            what: What::Pod {
                pod: "default/a".into(),
                change: "Ready".into(),
            },
        }
    }

    #[test]
    fn text_and_json_lines_write_one_line_per_event() {
        let mut t = TextSink::new(Vec::new());
        let mut j = JsonLinesSink::new(Vec::new());
        for s in [&mut t as &mut dyn EventSink, &mut j] {
            s.event(&ev(1)).unwrap();
            s.event(&ev(2)).unwrap();
            s.finish().unwrap();
        }
        let text = String::from_utf8(t.into_inner()).unwrap();
        assert_eq!(
            text,
            "00:00:00.000  pod default/a: Ready\n00:00:00.000  pod default/a: Ready\n"
        );
        let json = String::from_utf8(j.into_inner()).unwrap();
        let lines: Vec<&str> = json.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("{\"t_ns\":2,"), "{}", lines[1]);
        assert!(lines[1].contains("\"kind\":\"pod\""), "{}", lines[1]);
    }

    #[test]
    fn a_shared_collector_is_read_after_the_run() {
        let c = Rc::new(RefCell::new(Collect::default()));
        let mut s: Box<dyn EventSink> = Box::new(c.clone());
        s.event(&ev(5)).unwrap();
        drop(s);
        assert_eq!(c.borrow().events, vec![ev(5)]);
    }
}
