//! One rank of a data-parallel job under `mpirun` (or, with `--single`, the same training in
//! one process), writing the parameters after every optimizer step for `cargo xtask mpi` to
//! compare, and failing on request the ways a rank can fail.
//!
//! ```sh
//! cargo build -p ember --features mpi --example mpi_ranks
//! mpirun --oversubscribe -n 2 target/debug/examples/mpi_ranks --workers 2 --out /tmp/ranks
//! target/debug/examples/mpi_ranks --single --workers 4 --out /tmp/ranks
//! ```
//!
//! Output: `<out>/params.rank<r>` (or `params.single`): for each optimizer step, every
//! parameter as little-endian `f32`, in the module's visit order.
//!
//! Faults, each on rank `--fault-rank` (default 1) at optimizer step `--fault-at` (default 3):
//! `--fail` poisons a batch of that rank's shard so its step panics on one device; `--kill`
//! sends the rank SIGKILL; `--hang` makes it sleep forever, so the others' wait times out
//! (`--timeout`, seconds).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::{MpiComm, TrainError, Trainer, TrainerConfig};
use ember_tests::{Mlp, PoisonedLoader, parameters, regression_loader};

const ROWS: usize = 256;
const BATCH: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    Fail,
    Kill,
    Hang,
}

#[derive(Debug)]
struct Args {
    single: bool,
    workers: usize,
    out: std::path::PathBuf,
    epochs: usize,
    fault: Fault,
    fault_rank: usize,
    fault_at: usize,
    timeout: Duration,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        single: false,
        workers: 2,
        out: std::path::PathBuf::from("ranks-out"),
        epochs: 2,
        fault: Fault::None,
        fault_rank: 1,
        fault_at: 3,
        timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let number = |text: String| text.parse::<usize>().map_err(|e| e.to_string());
        match arg.as_str() {
            "--single" => args.single = true,
            "--workers" => args.workers = number(value("--workers")?)?,
            "--epochs" => args.epochs = number(value("--epochs")?)?,
            "--out" => args.out = value("--out")?.into(),
            "--fail" => args.fault = Fault::Fail,
            "--kill" => args.fault = Fault::Kill,
            "--hang" => args.fault = Fault::Hang,
            "--fault-rank" => args.fault_rank = number(value("--fault-rank")?)?,
            "--fault-at" => args.fault_at = number(value("--fault-at")?)?,
            "--timeout" => args.timeout = Duration::from_secs(number(value("--timeout")?)? as u64),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// How long a rank that ends because another failed waits before exiting, so that the failed
/// rank's own error line reaches mpirun's output before mpirun ends the job.
const PEER_REPORT_GRACE: Duration = Duration::from_millis(500);

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let comm = if args.single {
        None
    } else {
        match MpiComm::world(args.timeout) {
            Ok(comm) => Some(comm),
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        }
    };
    let (rank, size) = comm.as_ref().map_or((0, 1), |comm| {
        use ember::Communicator;
        (comm.rank(), comm.size())
    });
    match train(&args, rank, comm) {
        Ok(updates) => {
            println!("rank {rank} of {size}: {updates} optimizer steps");
            ExitCode::SUCCESS
        }
        Err(error) => {
            // One write: mpirun merges every rank's stderr, and a line written in pieces
            // interleaves with another rank's.
            let line = format!("error: rank {rank} of {size}: {error}\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            if error
                .downcast_ref::<TrainError>()
                .is_some_and(TrainError::peers_failed)
            {
                // mpirun ends the whole job when the first process exits with an error; the
                // failed rank, released by the same round, is still writing its own.
                std::thread::sleep(PEER_REPORT_GRACE);
            }
            ExitCode::FAILURE
        }
    }
}

fn train(
    args: &Args,
    rank: usize,
    comm: Option<MpiComm>,
) -> Result<usize, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&args.out)?;
    let name = if comm.is_some() {
        format!("params.rank{rank}")
    } else {
        "params.single".to_owned()
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(args.out.join(name))?);
    let device = Device::flex().autodiff();
    // Rank 0 starts from the single run's parameters; the others elsewhere, until the
    // broadcast.
    device.seed(if rank == 0 { 42 } else { 1000 + rank as u64 });
    let model = Mlp::new(16, &device);

    let faulty = comm.is_some() && rank == args.fault_rank;
    let mut loader = regression_loader(7, ROWS, BATCH, &device);
    if faulty && args.fault == Fault::Fail {
        // Row 200: in rank 1's shard of 2 (rows 128..256), on its second device's slice.
        loader = PoisonedLoader::wrap(loader, ROWS - 56, "a batch this rank cannot train on");
    }
    let fault = if faulty { args.fault } else { Fault::None };
    let fault_at = args.fault_at;
    let (sender, written) = std::sync::mpsc::channel::<Vec<u8>>();
    let mut trainer = Trainer::new(
        vec![device.clone(); args.workers],
        SgdConfig::new().init(),
        0.02,
        TrainerConfig {
            epochs: args.epochs,
            histogram_every: None,
            ..TrainerConfig::default()
        },
    )
    .on_update(move |model: &Mlp, update| {
        let bytes: Vec<u8> = parameters(model)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        // The channel only closes when training is over.
        let _ = sender.send(bytes);
        if update == fault_at {
            match fault {
                Fault::Kill => {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &std::process::id().to_string()])
                        .status();
                }
                Fault::Hang => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
                Fault::None | Fault::Fail => {}
            }
        }
    });
    if let Some(comm) = comm {
        trainer = trainer.communicator(comm);
    }
    let result = trainer.fit(model, loader, None, None);
    let mut updates = 0;
    for bytes in written.try_iter() {
        out.write_all(&bytes)?;
        updates += 1;
    }
    out.flush()?;
    result?;
    Ok(updates)
}
