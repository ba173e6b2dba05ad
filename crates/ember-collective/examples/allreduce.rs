//! Times `MpiComm`'s all-reduce (the cost of one round across ranks) for each gradient size
//! given, in `f32` values; rank 0 prints one JSON line per size.
//!
//! ```sh
//! cargo build --release -p ember-collective --features mpi --example allreduce
//! mpirun -n 2 target/release/examples/allreduce 1000 1000000
//! ```

use std::time::{Duration, Instant};

use ember_collective::{Communicator, MpiComm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let mut comm = MpiComm::world(Duration::from_secs(120))?;
    for size in sizes {
        let mut values = vec![1.0f32; size];
        // About half a second per size, at least 5 runs, after 3 unmeasured.
        for _ in 0..3 {
            comm.all_reduce_sum(&mut values)?;
        }
        let started = Instant::now();
        comm.all_reduce_sum(&mut values)?;
        let first = started.elapsed().as_secs_f64();
        let mut runs = [((0.5 / first.max(1e-7)) as usize).clamp(5, 2_000) as f32];
        // Every rank must run the same count: rank 0's.
        comm.broadcast(&mut runs, 0)?;
        let mut times = Vec::with_capacity(runs[0] as usize);
        for _ in 0..runs[0] as usize {
            let started = Instant::now();
            comm.all_reduce_sum(&mut values)?;
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
        times.sort_by(f64::total_cmp);
        if comm.rank() == 0 {
            println!(
                "{{\"values\": {size}, \"processes\": {}, \"runs\": {}, \"median_us\": {:.3}, \"min_us\": {:.3}, \"max_us\": {:.3}}}",
                comm.size(),
                times.len(),
                times[times.len() / 2],
                times[0],
                times[times.len() - 1]
            );
        }
    }
    Ok(())
}
