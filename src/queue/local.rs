//! A local queue for one machine: at most N worker processes at a time, each running one cell
//! (`wanda run FILE --cell-index I`), the next pending cell starting as soon as a worker is
//! free. With GPUs each worker slot is pinned to one through `CUDA_VISIBLE_DEVICES`; on the CPU
//! the cores are split between the slots so N workers do not fight over them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What the processes of one worker slot get in their environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSlot {
    /// Slot number, 0-based.
    pub index: usize,
    /// `CUDA_VISIBLE_DEVICES` for its processes (a GPU UUID), when there are GPUs.
    pub cuda_visible_devices: Option<String>,
    /// `RAYON_NUM_THREADS` / `MATMUL_NUM_THREADS` for its processes, on the CPU.
    pub threads: Option<usize>,
}

/// `workers` slots: with GPUs, slot `k` gets GPU `k mod gpus` (so one worker per GPU when
/// `workers` equals their count); without, each slot gets `cpus / workers` threads (at
/// least 1).
pub fn worker_slots(workers: usize, gpus: &[String], cpus: usize) -> Vec<WorkerSlot> {
    let workers = workers.max(1);
    (0..workers)
        .map(|index| WorkerSlot {
            index,
            cuda_visible_devices: (!gpus.is_empty()).then(|| gpus[index % gpus.len()].clone()),
            threads: gpus.is_empty().then(|| (cpus / workers).max(1)),
        })
        .collect()
}

/// What the queue reports.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueEvent {
    /// A worker started a cell.
    Started {
        /// Cell index.
        cell: usize,
        /// Worker slot.
        slot: usize,
        /// Its log.
        log: PathBuf,
    },
    /// A cell's process ended.
    Finished {
        /// Cell index.
        cell: usize,
        /// Whether it exited with success.
        success: bool,
        /// Its log.
        log: PathBuf,
    },
}

/// Runs `cells` (indices) on `slots`, starting `command(cell)` with the slot's environment and
/// its output in `log_dir/cell-<index>.log`; returns each cell with whether it succeeded, in
/// the order they ended.
pub fn run_queue(
    cells: &[usize],
    slots: &[WorkerSlot],
    command: impl Fn(usize) -> Command,
    log_dir: &Path,
    mut on_event: impl FnMut(QueueEvent),
) -> std::io::Result<Vec<(usize, bool)>> {
    std::fs::create_dir_all(log_dir)?;
    let mut pending = cells.iter().copied();
    let mut running: Vec<Option<(usize, Child, PathBuf)>> = slots.iter().map(|_| None).collect();
    let mut ended = Vec::new();
    loop {
        for (slot, busy) in slots.iter().zip(running.iter_mut()) {
            if busy.is_some() {
                continue;
            }
            let Some(cell) = pending.next() else { break };
            let log = log_dir.join(super::local_log_name(cell));
            let out = File::create(&log)?;
            let mut cmd = command(cell);
            cmd.stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out);
            if let Some(gpu) = &slot.cuda_visible_devices {
                cmd.env("CUDA_VISIBLE_DEVICES", gpu);
            }
            if let Some(threads) = slot.threads {
                cmd.env("RAYON_NUM_THREADS", threads.to_string())
                    .env("MATMUL_NUM_THREADS", threads.to_string());
            }
            let child = cmd.spawn()?;
            on_event(QueueEvent::Started {
                cell,
                slot: slot.index,
                log: log.clone(),
            });
            *busy = Some((cell, child, log));
        }
        if running.iter().all(Option::is_none) {
            return Ok(ended);
        }
        std::thread::sleep(Duration::from_millis(100));
        for busy in running.iter_mut() {
            let Some((cell, child, _)) = busy else {
                continue;
            };
            if let Some(status) = child.try_wait()? {
                let (cell, log) = (
                    *cell,
                    busy.take().map(|(_, _, log)| log).unwrap_or_default(),
                );
                ended.push((cell, status.success()));
                on_event(QueueEvent::Finished {
                    cell,
                    success: status.success(),
                    log,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_pin_one_gpu_each_or_split_the_cores() {
        let gpus = ["GPU-a".to_string(), "GPU-b".to_string()];
        let slots = worker_slots(3, &gpus, 16);
        let pinned: Vec<Option<&str>> = slots
            .iter()
            .map(|s| s.cuda_visible_devices.as_deref())
            .collect();
        assert_eq!(pinned, [Some("GPU-a"), Some("GPU-b"), Some("GPU-a")]);
        assert!(slots.iter().all(|s| s.threads.is_none()));
        let cpu = worker_slots(2, &[], 2);
        assert_eq!(cpu.len(), 2);
        assert!(cpu
            .iter()
            .all(|s| s.threads == Some(1) && s.cuda_visible_devices.is_none()));
        assert_eq!(worker_slots(4, &[], 2)[3].threads, Some(1));
    }

    #[test]
    fn the_queue_runs_every_cell_at_most_n_at_once_and_reports_failures() {
        let dir = tempfile::tempdir().unwrap();
        let slots = worker_slots(2, &[], 2);
        let marks = dir.path().join("marks");
        std::fs::create_dir_all(&marks).unwrap();
        // Each "cell" records how many cells run beside it, then fails if its index is 3.
        let script = format!(
            "touch {m}/$0; sleep 0.3; ls {m} | wc -l; rm {m}/$0; test $0 != 3",
            m = marks.display()
        );
        let mut events = Vec::new();
        let ended = run_queue(
            &[0, 1, 2, 3, 4],
            &slots,
            |cell| {
                let mut c = Command::new("sh");
                c.arg("-c").arg(&script).arg(cell.to_string());
                c
            },
            &dir.path().join("logs"),
            |e| events.push(e),
        )
        .unwrap();
        let mut cells: Vec<usize> = ended.iter().map(|(c, _)| *c).collect();
        cells.sort_unstable();
        assert_eq!(cells, [0, 1, 2, 3, 4]);
        assert!(ended.iter().all(|(c, ok)| *ok == (*c != 3)));
        assert_eq!(events.len(), 10);
        for cell in 0..5 {
            let log =
                std::fs::read_to_string(dir.path().join(format!("logs/cell-{cell}.log"))).unwrap();
            let beside: usize = log.trim().parse().unwrap();
            assert!((1..=2).contains(&beside), "cell {cell} saw {beside}");
        }
    }
}
