//! Ctrl-C stops `ember train` after the current step, with whole logs in both formats and
//! exit code 130.

use super::*;

/// `ember train` for 1000 epochs, sent SIGINT once it has finished its first epoch. Returns
/// the log dir, the exit status and stdout.
fn interrupted_train(dir: &Path, format: &str) -> (PathBuf, ExitStatus, String) {
    let logdir = dir.join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args([
            "train",
            "--subset",
            "300",
            "--epochs",
            "1000",
            "--format",
            format,
            "--logdir",
            path_str(&logdir),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ember binary runs");
    let mut child = Spawned(child);
    // Without a terminal the progress bar is hidden and each epoch is one stderr line.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (lines, training) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.starts_with("epoch ") && lines.send(()).is_err() {
                break;
            }
        }
    });
    training
        .recv_timeout(Duration::from_secs(120))
        .expect("ember train finishes an epoch");
    let pid = child.0.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let status = exit_within(&mut child, Duration::from_secs(60));
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    (logdir, status, stdout)
}

/// Every record of `file`, asserting the file is whole: no truncated tail, no damage.
fn whole_records(file: &Path) -> Vec<Vec<u8>> {
    let scan = Scan::file(file).unwrap();
    assert!(scan.problems.is_empty(), "{file:?}: {:?}", scan.problems);
    scan.records.into_iter().map(|r| r.data).collect()
}

#[test]
fn ctrl_c_stops_train_with_whole_tensorboard_logs_and_a_failure_status() {
    let dir = tempfile::tempdir().unwrap();
    let (logdir, status, stdout) = interrupted_train(dir.path(), "tensorboard");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        stdout.contains(&format!("logs: {}", logdir.display())),
        "{stdout}"
    );

    let event_files = files(&logdir, "tfevents");
    assert_eq!(event_files.len(), 1);
    let mut statuses = Vec::new();
    let mut interrupted = false;
    for data in whole_records(&event_files[0]) {
        let event = tensorboard::Event::decode(data.as_slice()).unwrap();
        let Some(tensorboard::event::What::Summary(summary)) = event.what else {
            continue;
        };
        for value in summary.value {
            interrupted |= value.tag == "run/interrupted";
            if value.tag != hparams_tags::SESSION_END_INFO {
                continue;
            }
            let plugin = value.metadata.unwrap().plugin_data.unwrap();
            let data = hparams::HParamsPluginData::decode(plugin.content.as_slice()).unwrap();
            if let Some(hparams::h_params_plugin_data::Data::SessionEndInfo(end)) = data.data {
                statuses.push(end.status());
            }
        }
    }
    assert_eq!(statuses, [hparams::Status::Failure]);
    assert!(interrupted, "no run/interrupted scalar");
}

#[test]
fn ctrl_c_stops_train_with_whole_mindinsight_logs_and_a_written_lineage_file() {
    let dir = tempfile::tempdir().unwrap();
    let (logdir, status, stdout) = interrupted_train(dir.path(), "mindinsight");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        stdout.contains(&format!("logs: {}", logdir.display())),
        "{stdout}"
    );

    let event_files = files(&logdir, ".out.events.summary.");
    assert!(!event_files.is_empty());
    let mut lineage_files = 0;
    let mut user_defined = 0;
    let mut interrupted = false;
    for file in &event_files {
        let records = whole_records(file);
        if file.to_string_lossy().ends_with("_lineage") {
            lineage_files += 1;
            assert!(!records.is_empty(), "{file:?} is empty");
            for data in records {
                let event = mindspore::LineageEvent::decode(data.as_slice()).unwrap();
                if let Some(mindspore::lineage_event::What::UserDefinedInfo(_)) = event.what {
                    user_defined += 1;
                }
            }
        } else {
            for data in records {
                let event = mindspore::Event::decode(data.as_slice()).unwrap();
                if let Some(mindspore::event::What::Summary(summary)) = event.what {
                    interrupted |= summary.value.iter().any(|v| v.tag == "run/interrupted");
                }
            }
        }
    }
    assert_eq!(lineage_files, 1);
    // The hyper-parameters at the start, and again with the run's end.
    assert_eq!(user_defined, 2);
    assert!(interrupted, "no run/interrupted scalar");
}
