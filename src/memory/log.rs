//! The memory log: named checkpoints of process RSS and peak RSS (`/proc/self/status` VmRSS
//! and VmHWM), available system RAM (`/proc/meminfo`), and — when an NVIDIA GPU and driver
//! are present — GPU memory through NVML, loaded at run time so CPU-only machines need
//! nothing. Written as `memory_log.csv` with the columns of the Python reference
//! (`Timestamp,Checkpoint,GPU_Allocated_GB,GPU_Reserved_GB,GPU_Peak_GB,CPU_Used_GB,CPU_Percent`)
//! followed by four more (`Elapsed_s,CPU_Peak_GB,RAM_Available_GB,GPU_Total_GB`); GPU cells
//! are empty without a GPU.
//!
//! Column meanings here: `GPU_Allocated` is this process's GPU memory (NVML per-process
//! accounting; the device's used memory when the driver does not report per process),
//! `GPU_Reserved` the device's used memory (all processes and the driver's reserve), and
//! `GPU_Peak` the highest `GPU_Allocated` sampled — NVML keeps no peak, so call
//! [`MemoryLog::sample`] often (e.g. per layer) for a tighter one. `CPU_Used` is the process
//! RSS and `CPU_Percent` its share of total RAM.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;

const GIB: f64 = (1u64 << 30) as f64;

/// The CSV header.
pub const CSV_HEADER: &str = "Timestamp,Checkpoint,GPU_Allocated_GB,GPU_Reserved_GB,GPU_Peak_GB,CPU_Used_GB,CPU_Percent,Elapsed_s,CPU_Peak_GB,RAM_Available_GB,GPU_Total_GB";

/// The CSV file name in a run's output folder.
pub const CSV_FILE: &str = "memory_log.csv";

/// GPU memory at one moment, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuMemory {
    /// This process's memory (the device's used memory when per-process figures are missing).
    pub used: u64,
    /// Memory used on the device by everyone.
    pub device_used: u64,
    /// Device capacity.
    pub total: u64,
    /// Highest `used` sampled so far.
    pub peak: u64,
}

/// One checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Name, e.g. `02_model_loaded`.
    pub name: String,
    /// Seconds since the Unix epoch.
    pub unix_time: u64,
    /// Time since the log started.
    pub elapsed: Duration,
    /// Process resident set (None where `/proc` is missing).
    pub rss: Option<u64>,
    /// Process peak resident set so far (VmHWM, never below an RSS seen earlier).
    pub peak_rss: Option<u64>,
    /// Available system memory.
    pub available: Option<u64>,
    /// Total system memory.
    pub total_ram: Option<u64>,
    /// GPU memory; None on machines without an NVIDIA GPU.
    pub gpu: Option<GpuMemory>,
}

/// Reads GPU memory for one device through NVML.
struct GpuProbe {
    nvml: Nvml,
    index: u32,
    peak: u64,
}

impl std::fmt::Debug for GpuProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuProbe")
            .field("index", &self.index)
            .field("peak", &self.peak)
            .finish()
    }
}

impl GpuProbe {
    /// NVML with device `index`, or None when the library, the driver or the device is absent.
    fn open(index: u32) -> Option<Self> {
        let nvml = Nvml::init().ok()?;
        nvml.device_by_index(index).ok()?;
        Some(Self {
            nvml,
            index,
            peak: 0,
        })
    }

    fn read(&mut self) -> Option<GpuMemory> {
        let device = self.nvml.device_by_index(self.index).ok()?;
        let info = device.memory_info().ok()?;
        let pid = std::process::id();
        let own = device
            .running_compute_processes()
            .ok()
            .and_then(|ps| ps.into_iter().find(|p| p.pid == pid))
            .and_then(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            });
        let used = own.unwrap_or(info.used);
        self.peak = self.peak.max(used);
        Some(GpuMemory {
            used,
            device_used: info.used,
            total: info.total,
            peak: self.peak,
        })
    }
}

/// Checkpoints of memory use over a run.
#[derive(Debug)]
pub struct MemoryLog {
    start: Instant,
    checkpoints: Vec<Checkpoint>,
    gpu: Option<GpuProbe>,
}

impl Default for MemoryLog {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLog {
    /// A log watching GPU 0 when there is one.
    pub fn new() -> Self {
        Self::with_gpu(Some(0))
    }

    /// A log watching the GPU with this index, or no GPU (`None`, e.g. for `device: cpu`).
    pub fn with_gpu(index: Option<u32>) -> Self {
        Self {
            start: Instant::now(),
            checkpoints: Vec::new(),
            gpu: index.and_then(GpuProbe::open),
        }
    }

    /// Whether a GPU is being watched.
    pub fn has_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// Samples the GPU without recording a checkpoint, to catch peaks between checkpoints.
    pub fn sample(&mut self) {
        if let Some(gpu) = &mut self.gpu {
            let _ = gpu.read();
        }
    }

    /// Records a checkpoint and returns it.
    pub fn checkpoint(&mut self, name: impl Into<String>) -> &Checkpoint {
        let status = read_proc_kib("/proc/self/status", &["VmRSS:", "VmHWM:"]);
        let meminfo = read_proc_kib("/proc/meminfo", &["MemAvailable:", "MemTotal:"]);
        // The kernel's VmHWM comes from approximate per-CPU counters and can trail a VmRSS
        // read a moment earlier by a few pages; keep the reported peak at or above every RSS.
        let previous_peak = self.checkpoints.last().and_then(|c| c.peak_rss);
        let peak_rss = [status[1], status[0], previous_peak]
            .into_iter()
            .flatten()
            .max();
        let checkpoint = Checkpoint {
            name: name.into(),
            unix_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            elapsed: self.start.elapsed(),
            rss: status[0],
            peak_rss,
            available: meminfo[0],
            total_ram: meminfo[1],
            gpu: self.gpu.as_mut().and_then(GpuProbe::read),
        };
        self.checkpoints.push(checkpoint);
        let last = self.checkpoints.len() - 1;
        &self.checkpoints[last]
    }

    /// A log for one part of a run that starts with `earlier`'s checkpoints (e.g. the shared
    /// stages before a sweep cell) and watches the same GPU.
    pub fn continued_from(earlier: &MemoryLog, gpu_index: Option<u32>) -> Self {
        let mut log = Self::with_gpu(gpu_index);
        log.start = earlier.start;
        log.checkpoints = earlier.checkpoints.clone();
        log
    }

    /// The checkpoints so far.
    pub fn checkpoints(&self) -> &[Checkpoint] {
        &self.checkpoints
    }

    /// Highest peak RSS seen.
    pub fn peak_rss(&self) -> Option<u64> {
        self.checkpoints
            .iter()
            .filter_map(|c| c.peak_rss.or(c.rss))
            .max()
    }

    /// Highest GPU peak seen (None without a GPU).
    pub fn peak_gpu(&self) -> Option<u64> {
        self.checkpoints
            .iter()
            .filter_map(|c| c.gpu.map(|g| g.peak))
            .max()
    }

    /// The CSV text: header, then one row per checkpoint.
    pub fn to_csv(&self) -> String {
        let gb = |b: Option<u64>| {
            b.map(|b| format!("{:.3}", b as f64 / GIB))
                .unwrap_or_default()
        };
        let mut out = String::from(CSV_HEADER);
        out.push('\n');
        for c in &self.checkpoints {
            let percent = match (c.rss, c.total_ram) {
                (Some(rss), Some(total)) if total > 0 => {
                    format!("{:.2}", rss as f64 / total as f64 * 100.0)
                }
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{:.3},{},{},{}",
                iso8601_utc(c.unix_time),
                csv_field(&c.name),
                gb(c.gpu.map(|g| g.used)),
                gb(c.gpu.map(|g| g.device_used)),
                gb(c.gpu.map(|g| g.peak)),
                gb(c.rss),
                percent,
                c.elapsed.as_secs_f64(),
                gb(c.peak_rss),
                gb(c.available),
                gb(c.gpu.map(|g| g.total)),
            );
        }
        out
    }

    /// Writes `memory_log.csv` into `dir` (atomically).
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        crate::sys::write_atomic(&dir.join(CSV_FILE), self.to_csv().as_bytes())
    }

    /// A summary table: checkpoint, RSS, GPU alloc, GPU peak; then overall peaks.
    pub fn summary(&self) -> String {
        let gib = |b: Option<u64>| match b {
            Some(b) => format!("{:.2} GiB", b as f64 / GIB),
            None => "—".into(),
        };
        let width = self
            .checkpoints
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(0)
            .max(10);
        let rule = "-".repeat(width + 3 * 13);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<width$} {:>12} {:>12} {:>12}",
            "Checkpoint", "RSS", "GPU Alloc", "GPU Peak"
        );
        let _ = writeln!(out, "{rule}");
        for c in &self.checkpoints {
            let _ = writeln!(
                out,
                "{:<width$} {:>12} {:>12} {:>12}",
                c.name,
                gib(c.rss),
                gib(c.gpu.map(|g| g.used)),
                gib(c.gpu.map(|g| g.peak)),
            );
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, "Peak RSS: {}", gib(self.peak_rss()));
        match self.peak_gpu() {
            Some(peak) => {
                let _ = writeln!(out, "Peak GPU: {}", gib(Some(peak)));
            }
            None => {
                let _ = writeln!(out, "Peak GPU: no GPU");
            }
        }
        out
    }
}

/// Values in kB of the named fields of a `/proc` file (`/proc/<pid>/status`'s `VmRSS:`), as
/// bytes; None where absent.
pub fn read_proc_kib(path: &str, fields: &[&str]) -> Vec<Option<u64>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    fields
        .iter()
        .map(|field| {
            text.lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .map(|kib| kib * 1024)
        })
        .collect()
}

/// The bytes a run may still take for something it can do without (linears held compressed
/// beside their dense form): this machine's available memory (`MemAvailable`) less 1 GiB for the
/// rest of the run; unbounded where `/proc/meminfo` cannot be read.
pub fn spare_bytes() -> usize {
    let available = read_proc_kib("/proc/meminfo", &["MemAvailable:"])[0];
    available.map_or(usize::MAX, |bytes| {
        usize::try_from(bytes.saturating_sub(1 << 30)).unwrap_or(usize::MAX)
    })
}

/// Quotes a CSV field when it holds a comma, quote or newline.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch (civil-from-days, proleptic Gregorian).
fn iso8601_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spare bytes are what `/proc/meminfo` says is available, less 1 GiB (within what
    /// other processes take or free between the two reads).
    #[cfg(target_os = "linux")]
    #[test]
    fn spare_bytes_are_the_available_memory_less_a_gib() {
        let available = read_proc_kib("/proc/meminfo", &["MemAvailable:"])[0].expect("Linux");
        let spare = spare_bytes() as f64;
        let expected = available.saturating_sub(1 << 30) as f64;
        assert!(
            (spare - expected).abs() < 256.0 * 1024.0 * 1024.0,
            "{spare} vs {expected}"
        );
    }

    #[test]
    fn iso8601_matches_known_instants() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(1_766_880_930), "2025-12-28T00:15:30Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn rss_grows_after_allocating_and_the_csv_parses_back() {
        let mut log = MemoryLog::new();
        let before = log
            .checkpoint("01_start")
            .rss
            .expect("VmRSS from /proc/self/status");
        // Non-zero fill touches every page, so the memory is resident.
        let block = std::hint::black_box(vec![1u8; 200 << 20]);
        let after = log.checkpoint("02_allocated, 200 MB").rss.expect("VmRSS");
        assert!(
            after >= before + (150 << 20),
            "RSS grew from {before} to {after} bytes after allocating 200 MiB"
        );
        drop(block);
        let end = log.checkpoint("03_end").clone();
        assert!(
            end.peak_rss.expect("VmHWM") >= after,
            "peak RSS keeps the high-water mark"
        );
        assert!(end.available.expect("MemAvailable") > 0);
        assert!(end.elapsed >= log.checkpoints()[0].elapsed);

        let dir = tempfile::tempdir().expect("temp dir");
        log.write_csv(dir.path()).expect("csv written");
        let text = std::fs::read_to_string(dir.path().join(CSV_FILE)).expect("csv readable");
        assert_eq!(text, log.to_csv());
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(CSV_HEADER));
        let rows: Vec<Vec<String>> = lines.map(parse_csv_line).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[1][1], "02_allocated, 200 MB",
            "quoted name reads back whole"
        );
        for row in &rows {
            assert_eq!(row.len(), CSV_HEADER.split(',').count());
            assert_eq!(row[0].len(), "2025-12-28T00:15:30Z".len());
            for (i, field) in row.iter().enumerate().skip(2) {
                let gpu_column = matches!(i, 2 | 3 | 4 | 10);
                if gpu_column && !log.has_gpu() {
                    assert!(
                        field.is_empty(),
                        "no GPU: column {i} must be empty, got `{field}`"
                    );
                } else {
                    field
                        .parse::<f64>()
                        .unwrap_or_else(|_| panic!("column {i}: `{field}` is not a number"));
                }
            }
        }
        let rss_gb: f64 = rows[1][5].parse().expect("CPU_Used_GB");
        assert!((rss_gb - after as f64 / GIB).abs() < 1e-3);

        let summary = log.summary();
        assert!(summary.starts_with("Checkpoint"), "{summary}");
        assert!(summary.contains("02_allocated, 200 MB"));
        assert!(summary.contains("Peak RSS: "));
        if !log.has_gpu() {
            assert!(summary.contains("Peak GPU: no GPU"), "{summary}");
        }
    }

    /// A minimal CSV line reader (quoted fields, doubled quotes).
    fn parse_csv_line(line: &str) -> Vec<String> {
        let mut fields = vec![String::new()];
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    fields.last_mut().expect("a field").push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(String::new()),
                (c, _) => fields.last_mut().expect("a field").push(c),
            }
        }
        fields
    }

    #[test]
    fn cpu_only_log_reports_no_gpu() {
        let mut log = MemoryLog::with_gpu(None);
        assert!(!log.has_gpu());
        assert_eq!(log.checkpoint("start").gpu, None);
        assert_eq!(log.peak_gpu(), None);
    }

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
