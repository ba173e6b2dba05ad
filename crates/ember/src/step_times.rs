//! Where a run's step time went, and which device held the others up: gathered step by step
//! from the Trainer's reports while it trains, or from the series it recorded
//! (`device/<i>/step_seconds`, `step/devices_seconds`, `step/reduce_seconds`,
//! `step/optimizer_seconds`) when a log is read back, so `ember train`'s closing table and
//! `ember inspect`'s are the same table.

use std::collections::BTreeMap;
use std::fmt;

use crate::read::ScalarPoint;

/// A run's step times, added up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes {
    steps: usize,
    devices: f64,
    reduce: f64,
    optimizer: f64,
    /// Each device's own step time, summed, by device index.
    device_busy: Vec<f64>,
    /// How many steps each device was the last to answer in.
    slowest: Vec<usize>,
}

impl StepTimes {
    /// No steps yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one step: the devices' part on the training thread, each device's own step in
    /// device order, the reduction and the optimizer step (seconds).
    pub fn add(&mut self, devices: f64, device_seconds: &[f64], reduce: f64, optimizer: f64) {
        self.steps += 1;
        self.devices += devices;
        self.reduce += reduce;
        self.optimizer += optimizer;
        if self.device_busy.len() < device_seconds.len() {
            self.device_busy.resize(device_seconds.len(), 0.0);
            self.slowest.resize(device_seconds.len(), 0);
        }
        for (busy, seconds) in self.device_busy.iter_mut().zip(device_seconds) {
            *busy += seconds;
        }
        let last = device_seconds
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(device, _)| device);
        if let Some(device) = last {
            self.slowest[device] += 1;
        }
    }

    /// Adds the step a Trainer's [`on_step`](crate::Trainer::on_step) hook reports.
    #[cfg(feature = "burn")]
    pub fn add_report(&mut self, report: &crate::StepReport) {
        self.add(
            report.devices_seconds,
            &report.device_seconds,
            report.reduce_seconds,
            report.optimizer_seconds,
        );
    }

    /// The step times a run recorded, from its scalar series (as [`crate::read::scalars`]
    /// returns them); `None` when it recorded none (a run before these series, or not the
    /// lead rank's log). Across ranks, the rank's own `rank/<r>/device/<i>/step_seconds`
    /// series are not the run's step and are left out.
    pub fn from_scalars(series: &BTreeMap<String, Vec<ScalarPoint>>) -> Option<Self> {
        let devices = series.get("step/devices_seconds")?;
        let by_step = |tag: &str| -> BTreeMap<i64, f64> {
            series
                .get(tag)
                .map(|points| points.iter().map(|p| (p.step, p.value)).collect())
                .unwrap_or_default()
        };
        let reduce = by_step("step/reduce_seconds");
        let optimizer = by_step("step/optimizer_seconds");
        let mut device_steps = Vec::new();
        while let Some(points) = series.get(&format!("device/{}/step_seconds", device_steps.len()))
        {
            device_steps.push(
                points
                    .iter()
                    .map(|p| (p.step, p.value))
                    .collect::<BTreeMap<_, _>>(),
            );
        }
        let mut times = Self::new();
        for point in devices {
            // A device without a batch in a step (the end of an uneven epoch) took no time.
            let own: Vec<f64> = device_steps
                .iter()
                .map(|steps| steps.get(&point.step).copied().unwrap_or(0.0))
                .collect();
            times.add(
                point.value,
                &own,
                reduce.get(&point.step).copied().unwrap_or(0.0),
                optimizer.get(&point.step).copied().unwrap_or(0.0),
            );
        }
        Some(times)
    }

    /// Steps added.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The device that was the last to answer in the most steps, with that count.
    pub fn straggler(&self) -> Option<(usize, usize)> {
        self.slowest
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(device, count)| (count, std::cmp::Reverse(device)))
    }

    /// How many steps each device was the last to answer in, by device index.
    pub fn slowest_counts(&self) -> &[usize] {
        &self.slowest
    }
}

impl fmt::Display for StepTimes {
    /// A short table: the step's parts with their share of the step, then each device's own
    /// step, its wait for the slowest, and how often it was the slowest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.devices + self.reduce + self.optimizer;
        if self.steps == 0 || total <= 0.0 {
            return writeln!(f, "no step times recorded");
        }
        let per_step = |seconds: f64| seconds / self.steps as f64 * 1e3;
        let share = |seconds: f64| 100.0 * seconds / total;
        writeln!(
            f,
            "where the step time went ({} steps, {:.2} ms a step):",
            self.steps,
            per_step(total)
        )?;
        for (part, seconds) in [
            (
                "devices (forward, backward, waiting for the last)",
                self.devices,
            ),
            ("reducing the gradients", self.reduce),
            ("optimizer step", self.optimizer),
        ] {
            writeln!(
                f,
                "  {part:<50} {:>9.2} ms {:>5.1}%",
                per_step(seconds),
                share(seconds)
            )?;
        }
        for (device, busy) in self.device_busy.iter().enumerate() {
            let wait = (self.devices - busy).max(0.0);
            writeln!(
                f,
                "  device {device}: own step {:>8.2} ms, waiting for the slowest {:>8.2} ms, slowest in {} of {} steps",
                per_step(*busy),
                per_step(wait),
                self.slowest.get(device).copied().unwrap_or(0),
                self.steps
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(values: &[(i64, f64)]) -> Vec<ScalarPoint> {
        values
            .iter()
            .map(|&(step, value)| ScalarPoint {
                step,
                wall_time: 0.0,
                value,
            })
            .collect()
    }

    #[test]
    fn the_slowest_device_is_counted_per_step_and_named() {
        let mut times = StepTimes::new();
        times.add(0.030, &[0.010, 0.029], 0.001, 0.004);
        times.add(0.031, &[0.011, 0.030], 0.001, 0.004);
        times.add(0.020, &[0.019, 0.012], 0.001, 0.004);
        assert_eq!(times.slowest_counts(), [1, 2]);
        assert_eq!(times.straggler(), Some((1, 2)));
        let table = times.to_string();
        assert!(table.contains("device 1: own step    23.67 ms"), "{table}");
        assert!(table.contains("slowest in 2 of 3 steps"), "{table}");
        assert!(table.contains("optimizer step"), "{table}");
    }

    #[test]
    fn recorded_series_give_the_table_the_reports_gave() {
        let mut reported = StepTimes::new();
        reported.add(0.5, &[0.25, 0.5], 0.125, 0.25);
        reported.add(0.75, &[0.75, 0.5], 0.0, 0.0);
        let series = BTreeMap::from([
            (
                "step/devices_seconds".into(),
                points(&[(1, 0.5), (2, 0.75)]),
            ),
            (
                "step/reduce_seconds".into(),
                points(&[(1, 0.125), (2, 0.0)]),
            ),
            (
                "step/optimizer_seconds".into(),
                points(&[(1, 0.25), (2, 0.0)]),
            ),
            (
                "device/0/step_seconds".into(),
                points(&[(1, 0.25), (2, 0.75)]),
            ),
            (
                "device/1/step_seconds".into(),
                points(&[(1, 0.5), (2, 0.5)]),
            ),
            ("rank/1/device/0/step_seconds".into(), points(&[(1, 9.0)])),
        ]);
        assert_eq!(StepTimes::from_scalars(&series), Some(reported));
        assert_eq!(StepTimes::from_scalars(&BTreeMap::new()), None);
    }
}
