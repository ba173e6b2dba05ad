//! What `cargo xtask scaling` runs: each configuration (model, side, workers, cores,
//! summaries, device) and the sizes each model trains at.

/// One process to run each round.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) model: &'static str,
    pub(super) side: &'static str,
    pub(super) workers: u16,
    /// One core per worker (pinned, ember with a one-thread compute pool per worker) or not.
    pub(super) pinned: bool,
    pub(super) summaries: bool,
    /// On `wgpu:0` (and `wgpu:1`) instead of the flex CPU backend.
    pub(super) wgpu: bool,
}

impl Config {
    pub(super) fn key(&self) -> String {
        format!(
            "{} {} x{} {}{}{}",
            self.model,
            self.side,
            self.workers,
            if self.pinned { "pinned" } else { "free" },
            if self.summaries { " summaries" } else { "" },
            if self.wgpu { " wgpu" } else { "" }
        )
    }
}

/// The sizes one model trains at.
#[derive(Debug, Clone, Copy)]
pub(super) struct ModelSizes {
    pub(super) width: u32,
    pub(super) epochs: u16,
    /// Examples per batch on each worker (`ember bench scaling`'s default, 128, when `None`).
    pub(super) batch: Option<u16>,
    /// Only the first N digits (all of them when `None`).
    pub(super) subset: Option<u32>,
}

/// The sizes a run trains each model at.
pub(super) struct Sizes {
    digits: ModelSizes,
    deep: ModelSizes,
    conv: ModelSizes,
}

impl Sizes {
    pub(super) fn of(&self, model: &str) -> ModelSizes {
        match model {
            "digits" => self.digits,
            "deep" => self.deep,
            _ => self.conv,
        }
    }

    /// The sizes of every model: small ones with `quick` (CI), else the report's.
    pub(super) fn for_run(quick: bool) -> Self {
        if quick {
            let small = |width| ModelSizes {
                width,
                epochs: 1,
                batch: None,
                subset: Some(300),
            };
            Sizes {
                digits: small(256),
                deep: small(128),
                conv: ModelSizes {
                    batch: Some(16),
                    ..small(16)
                },
            }
        } else {
            let all = |width, epochs| ModelSizes {
                width,
                epochs,
                batch: None,
                subset: None,
            };
            Sizes {
                digits: all(16384, 4),
                deep: all(2048, 2),
                // 58 examples/s on one core: 640 training digits in batches of 64 a worker keep a
                // run near 10 s, with 10 steps on 1 worker and 5 on 2.
                conv: ModelSizes {
                    width: 512,
                    epochs: 1,
                    batch: Some(64),
                    subset: Some(800),
                },
            }
        }
    }

    /// Smaller models for lavapipe, which computes a CPU's work through a Vulkan driver: at
    /// the CPU rows' sizes one digits run took 67 s (86 examples/s). These keep a run near
    /// 10 s, so the wgpu rows compare the sides, not the models' scale.
    pub(super) fn on_lavapipe() -> Self {
        let model = |width, epochs, batch, subset| ModelSizes {
            width,
            epochs,
            batch,
            subset,
        };
        Sizes {
            digits: model(2048, 3, None, None),
            deep: model(512, 2, None, None),
            conv: model(64, 1, Some(32), Some(400)),
        }
    }
}

/// The models, in the report's order.
pub(super) const MODELS: [&str; 3] = ["digits", "deep", "conv"];

/// Every configuration a run measures: the CPU rows, ember under mpirun, the wgpu rows.
pub(super) fn configs(with_cpu: bool, with_mpi: bool, with_wgpu: bool) -> Vec<Config> {
    let mut configs = Vec::new();
    for model in MODELS {
        let config = |side, workers, pinned, summaries| Config {
            model,
            side,
            workers,
            pinned,
            summaries,
            wgpu: false,
        };
        if with_cpu {
            for workers in [1, 2] {
                configs.push(config("ember", workers, true, false));
                configs.push(config("burn-multi", workers, true, false));
                configs.push(config("burn-sharded", workers, true, false));
            }
            configs.push(config("burn-single", 1, true, false));
            configs.push(config("burn-ddp", 2, true, false));
            configs.push(config("ember", 1, false, false));
            configs.push(config("ember", 1, true, true));
            configs.push(config("ember", 2, true, true));
            configs.push(config("burn-multi", 2, true, true));
        }
        if with_mpi {
            configs.push(config("ember-mpi", 1, true, false));
            configs.push(config("ember-mpi", 2, true, false));
        }
        if with_wgpu {
            // lavapipe computes on llvmpipe's own threads: nothing to pin.
            let on_wgpu = |side, workers| Config {
                wgpu: true,
                ..config(side, workers, false, false)
            };
            for workers in [1, 2] {
                for side in ["ember", "burn-multi", "burn-sharded"] {
                    configs.push(on_wgpu(side, workers));
                }
            }
            configs.push(on_wgpu("burn-single", 1));
            configs.push(on_wgpu("burn-ddp", 2));
        }
    }
    configs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgpu_only_runs_every_model_on_wgpu_and_nothing_else() {
        let configs = configs(false, false, true);
        assert!(configs.iter().all(|c| c.wgpu));
        for model in MODELS {
            let sides: Vec<_> = configs.iter().filter(|c| c.model == model).collect();
            // ember, multi and sharded at 1 and 2 devices, single, ddp.
            assert_eq!(sides.len(), 8, "{model}: {sides:?}");
        }
    }
}
