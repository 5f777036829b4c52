//! Progress of long steps: a bar on a terminal, and plain lines where stderr is a log file, a
//! pipe or a Slurm output, so a run that takes an hour per cell still says it is moving.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{FormattedDuration, MultiProgress, ProgressBar, ProgressStyle};

/// The variable that sets how often a log line is written: seconds, or `off`.
const PROGRESS_SECONDS: &str = "WANDA_PROGRESS_SECONDS";

/// Seconds between log lines when [`PROGRESS_SECONDS`] is unset.
const DEFAULT_SECONDS: u64 = 30;

/// A `done / total` counter: `label [bar] pos/len unit elapsed (eta)` on stderr when it is a
/// terminal; otherwise a line `step: done/total unit, elapsed, eta` on stderr at most
/// every [`PROGRESS_SECONDS`] seconds, and one more when a step that wrote one ends.
#[derive(Clone)]
pub struct Counter {
    bar: ProgressBar,
    label: String,
    unit: String,
    /// The log lines' clock; `None` where the bar is drawn or lines are off.
    log: Option<Arc<Mutex<LogClock>>>,
}

/// When the last log line of a step was written, and what the step is.
struct LogClock {
    every: Duration,
    since: Instant,
    wrote: bool,
    context: String,
}

impl Counter {
    /// A counter drawn on stderr.
    pub fn new(label: &str, unit: &str) -> Self {
        Self::around(ProgressBar::new(0), label, unit)
    }

    /// A counter drawn as one of `bars`.
    pub fn within(bars: &MultiProgress, label: &str, unit: &str) -> Self {
        Self::around(bars.add(ProgressBar::new(0)), label, unit)
    }

    fn around(bar: ProgressBar, label: &str, unit: &str) -> Self {
        let template =
            format!("{label} {{bar:30}} {{pos}}/{{len}} {unit} {{elapsed}} (eta {{eta}})");
        let bar = bar.with_style(ProgressStyle::with_template(&template).expect("valid template"));
        let every = log_interval(std::env::var(PROGRESS_SECONDS).ok().as_deref());
        let log = every.filter(|_| bar.is_hidden()).map(|every| {
            Arc::new(Mutex::new(LogClock {
                every,
                since: Instant::now(),
                wrote: false,
                context: String::new(),
            }))
        });
        Self {
            bar,
            label: label.trim().to_string(),
            unit: unit.to_string(),
            log,
        }
    }

    /// Starts a new step, `context` naming it in log lines (a stage, a cell, a task).
    pub fn start(&self, context: &str) {
        self.bar.reset();
        if let Some(log) = &self.log {
            let mut clock = log.lock().unwrap_or_else(|e| e.into_inner());
            clock.since = Instant::now();
            clock.wrote = false;
            clock.context = context.to_string();
        }
    }

    /// Moves the counter to `done` of `total`.
    pub fn advance(&self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        let Some(log) = &self.log else {
            return;
        };
        let mut clock = log.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if due(now - clock.since, clock.every, done, total, clock.wrote) {
            let eta = (done < total).then(|| self.bar.eta());
            eprintln!(
                "{}",
                line(
                    &self.label,
                    &clock.context,
                    [done, total],
                    &self.unit,
                    self.bar.elapsed(),
                    eta
                )
            );
            clock.since = now;
            clock.wrote = true;
        }
    }

    /// Removes the bar from the terminal.
    pub fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// The log interval [`PROGRESS_SECONDS`] asks for: `None` for `off`; unset or unreadable, the
/// default.
fn log_interval(value: Option<&str>) -> Option<Duration> {
    match value.map(str::trim) {
        Some("off") => None,
        Some(v) => Some(Duration::from_secs(v.parse().unwrap_or(DEFAULT_SECONDS))),
        None => Some(Duration::from_secs(DEFAULT_SECONDS)),
    }
}

/// Whether a log line is due: `every` has passed since the step began or since its last line,
/// or the step ended and wrote a line before (a step too short for any writes none).
fn due(since: Duration, every: Duration, done: usize, total: usize, wrote: bool) -> bool {
    since >= every || (done >= total && wrote)
}

/// One log line, named by the step's context or else the counter's label: `prune (wanda-0.5):
/// 12/30 steps, 00:01:05 elapsed, eta 00:01:40`.
fn line(
    label: &str,
    context: &str,
    [done, total]: [usize; 2],
    unit: &str,
    elapsed: Duration,
    eta: Option<Duration>,
) -> String {
    let what = match context {
        "" => label,
        step => step,
    };
    let eta = eta.map_or(String::new(), |e| format!(", eta {}", FormattedDuration(e)));
    format!(
        "{what}: {done}/{total} {unit}, {} elapsed{eta}",
        FormattedDuration(elapsed)
    )
}

/// Prints `text` above `bar`, or on stdout when the bar is hidden (output is not a terminal),
/// so logs and pipes keep the line.
pub fn say(bar: &ProgressBar, text: &str) {
    if bar.is_hidden() {
        println!("{text}");
    } else {
        bar.println(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_read_from_the_variable() {
        assert_eq!(log_interval(None), Some(Duration::from_secs(30)));
        assert_eq!(log_interval(Some("5")), Some(Duration::from_secs(5)));
        assert_eq!(log_interval(Some(" 0 ")), Some(Duration::ZERO));
        assert_eq!(log_interval(Some("off")), None);
        assert_eq!(log_interval(Some("soon")), Some(Duration::from_secs(30)));
    }

    #[test]
    fn a_line_is_due_every_interval_and_at_the_end_of_a_step_that_logged() {
        let (s, every) = (Duration::from_secs, Duration::from_secs(30));
        assert!(!due(s(29), every, 3, 30, false));
        assert!(due(s(30), every, 3, 30, false));
        assert!(due(s(31), every, 3, 30, true));
        // The end of a step: a line only if the step wrote one before.
        assert!(due(s(1), every, 30, 30, true));
        assert!(!due(s(1), every, 30, 30, false));
        assert!(due(Duration::ZERO, Duration::ZERO, 1, 30, false));
    }

    #[test]
    fn a_line_names_the_step_its_count_and_the_time() {
        let line = line(
            "stage",
            "prune (wanda-0.5)",
            [12, 30],
            "steps",
            Duration::from_secs(65),
            Some(Duration::from_secs(100)),
        );
        assert_eq!(
            line,
            "prune (wanda-0.5): 12/30 steps, 00:01:05 elapsed, eta 00:01:40"
        );
        let last = super::line(
            "perplexity",
            "",
            [4, 4],
            "windows",
            Duration::from_secs(3),
            None,
        );
        assert_eq!(last, "perplexity: 4/4 windows, 00:00:03 elapsed");
    }
}
