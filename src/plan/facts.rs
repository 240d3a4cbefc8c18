//! What the plan is computed from, as plain data, and how a stack gives
//! it: the cards (or the targets asked for), the override, torch's own
//! code and origin, the cards its rocBLAS lacks, and the diagnosis of its
//! MIOpen as the verb has it.

use crate::builder::profile::{self, Profile};
use crate::gpu;
use crate::stack::Stack;
use crate::torch::get::{Asked, Missing};
use crate::torch::{Layout, Torch};

/// Where the cards the plan is for come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Here {
    /// The RDNA1 cards of the KFD topology.
    Cards,
    /// --target.
    Asked,
    /// No GPU visible at all (containers, CI): judged as for every RDNA1
    /// target, as before.
    NoGpu,
    /// GPUs, none of them RDNA1 (named): nothing for this tool.
    NoRdna1(Vec<String>),
}

/// Who built torch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    TheRock,
    /// A wheel that bundles its ROCm libraries and reads `X.Y.Z+rocmA.B`.
    PytorchOrg,
    SelfBuilt,
}

/// The way MIOpen's fix goes for this torch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MiopenRoute {
    InPlace,
    /// Judged by this very command, before anything is written.
    Judging,
    /// The in-place fix cannot help: its help.
    Refused(String),
}

/// What the diagnosis says of torch's MIOpen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miopen {
    /// Batch norm fails on these cards.
    Fails {
        cards: Vec<String>,
        route: MiopenRoute,
    },
    /// Nothing fails (or a fix of ours is in place).
    Fine,
    /// Not judged by this command.
    Unknown,
    /// To be judged by this command (install's in-place route judges it
    /// before it fixes anything).
    Judging,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchFacts {
    /// Every target torch's own GPU code is for; None: not known.
    pub code: Option<Vec<String>>,
    pub origin: Origin,
    /// The cards rocBLAS has no code for.
    pub rocblas_lacks: Vec<String>,
    /// The profile that builds rocBLAS for torch's ROCm line, and its time.
    pub rocblas_profile: Option<String>,
    pub rocblas_cost: Option<String>,
    pub miopen: Miopen,
}

impl TorchFacts {
    /// Whether torch's code runs on `target`; None when not known.
    pub fn covers(&self, target: &str) -> Option<bool> {
        self.code
            .as_ref()
            .map(|c| c.iter().any(|t| crate::gpucode::runs_on(t, target)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The RDNA1 targets the plan is for: the machine's cards, or those
    /// asked for (gfx1010 where no GPU is visible).
    pub cards: Vec<String>,
    pub here: Here,
    /// HSA_OVERRIDE_GFX_VERSION and the target it makes ROCm report.
    pub overridden: Option<(String, String)>,
    /// None: no ROCm torch.
    pub torch: Option<TorchFacts>,
    /// With no ROCm torch, the python asked (None: not known) and whether
    /// a torch is there to be replaced: the torch step's commands are for
    /// it. None: TheRock's line for any pip.
    pub missing: Option<(Option<Asked>, bool)>,
}

impl Facts {
    /// The facts of `stack`, with the diagnosis as the verb has it.
    pub fn of(stack: &Stack, miopen: Miopen) -> Facts {
        let (cards, here) = cards(&stack.sysfs, &stack.asked);
        let overridden = std::env::var("HSA_OVERRIDE_GFX_VERSION")
            .ok()
            .filter(|v| !v.is_empty() && !v.starts_with("10.1."))
            .and_then(|v| gpu::override_gfx(&v).map(|t| (v, t)));
        let mut f = Facts {
            cards,
            here,
            overridden,
            torch: None,
            missing: None,
        };
        match &stack.torch {
            Ok(t) => f.torch = Some(torch_facts(t, &f, miopen)),
            Err(e) => {
                f.missing = crate::error::Hint::data_of::<Missing>(e)
                    .map(|m| (m.asked.clone(), m.installed));
            }
        }
        f
    }
}

/// The targets the plan is for, and where they come from.
pub fn cards(sysfs: &std::path::Path, asked: &[String]) -> (Vec<String>, Here) {
    if !asked.is_empty() {
        return (asked.to_vec(), Here::Asked);
    }
    let scan = gpu::scan_all(sysfs);
    let rdna1 = scan.rdna1_targets();
    match (scan.gpus.is_empty(), rdna1.is_empty()) {
        (true, _) => (vec!["gfx1010".to_owned()], Here::NoGpu),
        (false, true) => {
            let mut others: Vec<String> = Vec::new();
            for g in &scan.gpus {
                if !others.contains(&g.gfx()) {
                    others.push(g.gfx());
                }
            }
            (Vec::new(), Here::NoRdna1(others))
        }
        (false, false) => (rdna1, Here::Cards),
    }
}

fn torch_facts(t: &Torch, f: &Facts, miopen: Miopen) -> TorchFacts {
    let code = match (&t.layout, t.gpu_code()) {
        (_, Ok(Some(c))) if !c.all_targets().is_empty() => Some(c.all_targets()),
        (Layout::RocmSdk(sdk), _)
            if sdk.family.starts_with("gfx101")
                || crate::verdict::RDNA1.iter().any(|r| sdk.family.contains(r)) =>
        {
            Some(
                crate::verdict::RDNA1
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
            )
        }
        _ => None,
    };
    // Where no GPU is seen, torch's code is judged as before (the
    // override row says it), never by a card that is not there.
    let code = match f.here {
        Here::NoGpu => None,
        _ => code,
    };
    let origin = match &t.layout {
        Layout::RocmSdk(_) => Origin::TheRock,
        _ if crate::torch::origin::self_built(t) => Origin::SelfBuilt,
        _ => Origin::PytorchOrg,
    };
    let mut tf = TorchFacts {
        code,
        origin,
        rocblas_lacks: Vec::new(),
        rocblas_profile: None,
        rocblas_cost: None,
        miopen,
    };
    // rocBLAS is read for the real cards, what the plan is for (under
    // the override, once it is unset).
    if f.cards.iter().all(|c| tf.covers(c) != Some(false))
        && let Ok(libs) =
            crate::gpucode::closure(&t.dir.join("lib/libtorch_hip.so"), &t.preloaded_dirs())
    {
        for card in &f.cards {
            let lacks = crate::gpucode::survey(&libs, card).iter().any(|x| {
                (x.name == "rocBLAS" || x.name.starts_with("librocblas.so"))
                    && x.card_covered == Some(false)
            });
            if lacks {
                tf.rocblas_lacks.push(card.clone());
            }
        }
    }
    if let Some(p) = rocblas_profile(t) {
        tf.rocblas_cost = p.components["rocblas"]
            .cost
            .as_ref()
            .map(|c| c.time.clone());
        tf.rocblas_profile = Some(p.name);
    }
    tf
}

/// The built-in profile that builds rocBLAS for torch's ROCm line.
pub fn rocblas_profile(t: &Torch) -> Option<Profile> {
    let line = crate::version::major_minor(t.rocm());
    profile::builtin_names()
        .iter()
        .filter_map(|n| Profile::load(n).ok())
        .find(|p| {
            crate::version::major_minor(&p.rocm.torch_hip) == line
                && p.components.contains_key("rocblas")
        })
}
