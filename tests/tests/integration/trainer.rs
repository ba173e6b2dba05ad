//! The Trainer on 2 flex workers writes summaries that ember's reader decodes; a summary error
//! stops training only under `ErrorPolicy::Raise`; a failed or stopped run records how it
//! ended and leaves the caller's record open.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::pack::proto::tensorboard::{Event, event, hparams, summary};
use ember::pack::{Format, HParams};
use ember::read::Scan;
use ember::{SummaryRecord, Trainer, TrainerConfig};
use ember_tests::{Mlp, regression_loader};
use prost::Message;

/// Every event in every file under `dir`, with the file it came from.
pub(super) fn events(dir: &Path) -> Vec<(String, Event)> {
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    for path in paths {
        let scan = Scan::file(&path).unwrap();
        assert!(scan.problems.is_empty(), "{path:?}: {:?}", scan.problems);
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for record in scan.records {
            out.push((name.clone(), Event::decode(record.data.as_slice()).unwrap()));
        }
    }
    out
}

/// Steps at which each tag has a value, over every summary event.
pub(super) fn tag_steps(events: &[(String, Event)]) -> BTreeMap<String, Vec<i64>> {
    let mut tags: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (_, event) in events {
        if let Some(event::What::Summary(summary)) = &event.what {
            for value in &summary.value {
                tags.entry(value.tag.clone()).or_default().push(event.step);
            }
        }
    }
    tags
}

pub(super) fn trainer(epochs: usize) -> Trainer<Mlp> {
    let device = Device::flex().autodiff();
    Trainer::new(
        vec![device.clone(), device],
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs,
            histogram_every: Some(2),
            ..TrainerConfig::default()
        },
    )
    .hparams(HParams::new().with("hidden", 8.0))
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one run, then each summary it wrote read back in turn"
)]
fn a_trainer_run_on_two_workers_writes_readable_tensorboard_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    let train = regression_loader(1, 64, 8, &device);
    let valid = regression_loader(2, 16, 8, &device);
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let (_model, report) = trainer(2)
        .fit(Mlp::new(8, &device), train, Some(valid), Some(&mut summary))
        .unwrap();
    summary.close().unwrap();

    // 64 rows in batches of 8 over 2 workers: 4 steps per epoch.
    assert_eq!(report.steps, 8);
    assert_eq!(report.optimizer_steps, 8);
    assert!(report.last().unwrap().valid_loss.unwrap().is_finite());

    let events = events(dir.path());
    let tags = tag_steps(&events);
    assert_eq!(tags["train/loss"], (1..=8).collect::<Vec<i64>>());
    assert_eq!(tags["train/learning_rate"].len(), 8);
    assert_eq!(tags["device/0/step_seconds"].len(), 8);
    assert_eq!(tags["device/1/step_seconds"].len(), 8);
    assert_eq!(tags["valid/loss"], [4, 8]);
    assert_eq!(tags["weights/l1.weight"], [2, 4, 6, 8]);
    assert_eq!(tags["gradients/l2.bias"], [2, 4, 6, 8]);
    assert!(tags.contains_key("_hparams_/experiment"));
    assert!(tags.contains_key("_hparams_/session_start_info"));
    assert!(tags.contains_key("_hparams_/session_end_info"));
    assert_eq!(tags["final/valid_loss"], [8]);

    // Histograms are HistogramProto values; the graph is a GraphDef holding the module tree.
    let histogram = events.iter().find_map(|(_, e)| match &e.what {
        Some(event::What::Summary(s)) => s
            .value
            .iter()
            .find(|v| v.tag == "weights/l1.weight")
            .and_then(|v| v.value.clone()),
        _ => None,
    });
    match histogram {
        Some(summary::value::Value::Histo(h)) => assert_eq!(h.num, 16.0),
        other => panic!("expected a histogram, got {other:?}"),
    }
    let graph = events
        .iter()
        .find_map(|(_, e)| match &e.what {
            Some(event::What::GraphDef(bytes)) => Some(bytes.clone()),
            _ => None,
        })
        .expect("a graph event");
    let graph = ember::pack::proto::tensorboard::GraphDef::decode(graph.as_slice()).unwrap();
    let names: BTreeSet<String> = graph.node.iter().map(|n| n.name.clone()).collect();
    for expected in ["model", "model/l1", "model/l1/weight", "model/l2/bias"] {
        assert!(
            names.contains(expected),
            "{expected} missing from {names:?}"
        );
    }
    // Each module's op is its own type (the fixture's `Mlp { l1: Linear, act: Relu, l2:
    // Linear }`), and edges run from part to whole.
    let nodes: BTreeMap<&str, (&str, Vec<&str>)> = graph
        .node
        .iter()
        .map(|n| {
            let inputs = n.input.iter().map(String::as_str).collect();
            (n.name.as_str(), (n.op.as_str(), inputs))
        })
        .collect();
    assert_eq!(
        nodes["model"],
        ("Mlp", vec!["model/l1", "model/act", "model/l2"])
    );
    assert_eq!(
        nodes["model/l1"],
        ("Linear", vec!["model/l1/weight", "model/l1/bias"])
    );
    assert_eq!(nodes["model/act"], ("Relu", vec![]));
    assert_eq!(nodes["model/l2"].0, "Linear");
    assert_eq!(nodes["model/l2/bias"], ("Parameter", vec![]));

    // One hyper-parameter session: started once with every metric the run records, ended once.
    let experiments: Vec<&summary::Value> = events
        .iter()
        .filter_map(|(_, e)| match &e.what {
            Some(event::What::Summary(s)) => Some(s.value.iter()),
            _ => None,
        })
        .flatten()
        .filter(|v| v.tag.starts_with("_hparams_/"))
        .collect();
    let hparams_tags: Vec<&str> = experiments.iter().map(|v| v.tag.as_str()).collect();
    assert_eq!(
        hparams_tags,
        [
            "_hparams_/experiment",
            "_hparams_/session_start_info",
            "_hparams_/session_end_info"
        ]
    );
    let content = &experiments[0]
        .metadata
        .as_ref()
        .unwrap()
        .plugin_data
        .as_ref()
        .unwrap()
        .content;
    let Some(hparams::h_params_plugin_data::Data::Experiment(experiment)) =
        hparams::HParamsPluginData::decode(content.as_slice())
            .unwrap()
            .data
    else {
        panic!("the first hparams value is not the experiment")
    };
    let metrics: Vec<&str> = experiment
        .metric_infos
        .iter()
        .map(|m| m.name.as_ref().unwrap().tag.as_str())
        .collect();
    // A regression model: no accuracy.
    assert_eq!(
        metrics,
        [
            "train/loss",
            "final/train_loss",
            "valid/loss",
            "final/valid_loss"
        ]
    );
    for metric in metrics {
        assert!(
            tags.contains_key(metric),
            "{metric} was declared, never recorded"
        );
    }
}

#[test]
fn a_trainer_run_writes_mindinsight_summaries_too() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    let train = regression_loader(3, 32, 8, &device);
    let mut summary = SummaryRecord::builder(dir.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    trainer(1)
        .fit(Mlp::new(8, &device), train, None, Some(&mut summary))
        .unwrap();
    summary.close().unwrap();

    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    let summary_file = names
        .iter()
        .find(|n| n.contains(".out.events.summary.") && n.ends_with("_MS"))
        .unwrap_or_else(|| panic!("no MindInsight summary file in {names:?}"));
    let scan = Scan::file(dir.path().join(summary_file)).unwrap();
    assert!(scan.problems.is_empty());
    use ember::pack::proto::mindspore;
    let mut loss_steps = Vec::new();
    let mut version = None;
    for record in &scan.records {
        let event = mindspore::Event::decode(record.data.as_slice()).unwrap();
        match event.what {
            Some(mindspore::event::What::Version(v)) => version = Some(v),
            Some(mindspore::event::What::Summary(s))
                if s.value.iter().any(|v| v.tag == "train/loss") =>
            {
                loss_steps.push(event.step.unwrap_or_default());
            }
            _ => {}
        }
    }
    assert_eq!(version.as_deref(), Some("MindSpore.Event:1"));
    assert_eq!(loss_steps, [1, 2]);
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one run, then each lineage field its page reads checked in turn"
)]
fn a_mindinsight_run_writes_the_lineage_its_lineage_page_needs() {
    use ember::pack::proto::mindspore::{LineageEvent, UserDefinedInfo, lineage_event::What};
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    let mut summary = SummaryRecord::builder(dir.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    let (_model, report) = trainer(2)
        .fit(
            Mlp::new(8, &device),
            regression_loader(3, 32, 8, &device),
            Some(regression_loader(4, 24, 8, &device)),
            Some(&mut summary),
        )
        .unwrap();
    summary.close().unwrap();

    let lineage_file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("_lineage"))
        .expect("a lineage file");
    let scan = Scan::file(&lineage_file).unwrap();
    let whats: Vec<What> = scan
        .records
        .iter()
        .map(|r| {
            LineageEvent::decode(r.data.as_slice())
                .unwrap()
                .what
                .unwrap()
        })
        .collect();
    assert_eq!(whats.len(), 4, "{whats:?}");
    // Hyper-parameters at the start, one user_info entry each, as MindSpore's SummaryCollector.
    let What::UserDefinedInfo(start) = &whats[0] else {
        panic!("{:?}", whats[0])
    };
    let keys: Vec<String> = start
        .user_info
        .iter()
        .flat_map(|u| {
            u.map_int32
                .keys()
                .chain(u.map_double.keys())
                .chain(u.map_str.keys())
                .cloned()
        })
        .collect();
    assert_eq!(
        keys,
        [
            "hidden",
            "devices",
            "epochs",
            "reduction",
            "grad_accumulation"
        ]
    );
    assert_eq!(start.user_info[1].map_int32["devices"], 2);
    // The end: the status, then train and evaluation lineage.
    let mut status = UserDefinedInfo::default();
    status
        .map_str
        .insert("session_status".into(), "success".into());
    assert_eq!(
        whats[1],
        What::UserDefinedInfo(UserDefinedInfo {
            user_info: vec![status],
            ..Default::default()
        })
    );
    let What::TrainLineage(train) = &whats[2] else {
        panic!("{:?}", whats[2])
    };
    let hp = train.hyper_parameters.as_ref().unwrap();
    assert_eq!(
        (hp.epoch, hp.device_num, hp.batch_size, hp.learning_rate),
        (Some(2), Some(2), Some(8), Some(0.05))
    );
    assert_eq!(hp.parallel_mode.as_deref(), Some("data_parallel"));
    let algorithm = train.algorithm.as_ref().unwrap();
    assert_eq!(algorithm.network.as_deref(), Some("Mlp"));
    assert_eq!(
        algorithm.loss,
        Some(report.last().unwrap().train_loss as f32)
    );
    assert_eq!(
        train.train_dataset.as_ref().unwrap().train_dataset_size,
        Some(32)
    );
    let What::EvaluationLineage(eval) = &whats[3] else {
        panic!("{:?}", whats[3])
    };
    let valid_loss = report.last().unwrap().valid_loss.unwrap();
    assert_eq!(
        eval.metric.as_deref(),
        Some(format!("{{\"valid_loss\": {valid_loss:?}}}").as_str())
    );
    assert_eq!(
        eval.valid_dataset.as_ref().unwrap().valid_dataset_size,
        Some(24)
    );
}
