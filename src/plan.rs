//! The plan: what the user should do next on this machine, in order,
//! computed once per command from the established stack (the cards of
//! the KFD topology, HSA_OVERRIDE_GFX_VERSION, torch's own GPU code, the
//! code of the libraries it loads, the diagnosis of its MIOpen). doctor's
//! first line, its route row and every failing row's fix line, `install
//! --dry-run` and `--json` all read this one object, so they cannot
//! disagree.
//!
//! The order: the torch for every RDNA1 card torch has no code for, in one
//! line naming every device; then the libraries built for the cards they
//! lack (rocBLAS); then MIOpen's batch-norm fix. Only a torch step blocks
//! what follows it: what follows is said as "after ..., run doctor
//! again", and nothing is proven now for a torch that step replaces.
//!
//! Below the verbs (inspect, commands), above the stack and the diagnosis:
//! [`Facts`] is plain data, [`plan`] a function of it (`facts` gathers it
//! from a stack).

use serde::Serialize;

pub(crate) mod advice;
pub mod facts;
mod helps;

pub use crate::output::and;
pub use facts::{Facts, Here, Miopen, MiopenRoute, Origin, TorchFacts};
pub use helps::{UNSET_HELP, inert_help, miopen_breaks, no_code_help, no_code_row, torch_line};

/// A command a step runs: a program and its arguments, printed by
/// [`render`] alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cmd {
    pub program: String,
    pub args: Vec<String>,
}

impl Cmd {
    pub fn new(program: &str, args: &[&str]) -> Cmd {
        Cmd {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// This tool with `args`.
    pub fn tool(args: &[&str]) -> Cmd {
        Cmd::new("rdna1-patch", args)
    }
}

/// The one way a plan's command is printed: the renderer's
/// (`crate::shell`), each word quoted where the shell needs it.
pub fn render(c: &Cmd) -> String {
    crate::shell::line(std::iter::once(&c.program).chain(&c.args))
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The torch built for the cards (TheRock's, one device extra each).
    Torch,
    /// HSA_OVERRIDE_GFX_VERSION unset: torch has the real cards' code.
    Override,
    /// rocBLAS built for the cards it lacks.
    Rocblas,
    /// MIOpen's batch-norm fix (in place, or a build).
    Miopen,
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub kind: Kind,
    /// What it fixes, in a torch user's words.
    pub fixes: String,
    /// The cards it is for.
    pub cards: Vec<String>,
    /// What it costs.
    pub cost: String,
    /// Its commands, run in order (none where only a help can be said).
    pub commands: Vec<Cmd>,
    /// What to do where there is no command, or why the command is this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// The earlier step it waits for, said ("after the torch for gfx1012,
    /// run doctor again"): nothing of it is proven now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Another way to the same end, with its own cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub or: Option<Box<Step>>,
}

impl Step {
    /// The step in a few words ("the torch for gfx1010 and gfx1012").
    pub fn short(&self) -> String {
        let cards = and(&self.cards);
        match self.kind {
            Kind::Torch => format!("the torch for {cards}"),
            Kind::Override => "unset HSA_OVERRIDE_GFX_VERSION".to_owned(),
            Kind::Rocblas if self.replaces_torch() => {
                format!("TheRock's torch for {cards}, its rocBLAS built for them")
            }
            Kind::Rocblas => format!("rocBLAS for {cards}"),
            Kind::Miopen => format!("MIOpen's batch-norm fix for {cards}"),
        }
    }

    /// Whether it installs another torch (TheRock's) in place of this one.
    pub fn replaces_torch(&self) -> bool {
        self.commands
            .iter()
            .any(|c| c.args.iter().any(|a| a.starts_with("torch[")))
    }

    /// The step as a row's fix line says it.
    pub fn fix(&self) -> String {
        let or = self.or.as_ref().map_or_else(String::new, |o| {
            format!(
                "; or, in place of this torch, TheRock's torch for {} ({}): {}, then run this again",
                and(&o.cards),
                o.cost,
                o.commands_said()
            )
        });
        match (self.kind, self.replaces_torch()) {
            (Kind::Rocblas, true) => format!(
                "TheRock's torch has rocBLAS for {}: {}",
                and(&self.cards),
                self.commands_said()
            ),
            (Kind::Rocblas, false) if !self.commands.is_empty() => format!(
                "build rocBLAS for {} with its Tensile kernels, {}, and put it under this torch as one reversible transaction: {}{or}",
                and(&self.cards),
                self.cost,
                self.commands_said()
            ),
            (_, true) => format!(
                "install the torch built for {}: {}, then run this again{}",
                and(&self.cards),
                self.commands_said(),
                self.help
                    .as_ref()
                    .map_or_else(String::new, |h| format!(" ({h})"))
            ),
            _ => self.line(),
        }
    }

    /// Its commands, each in backticks, joined by "then".
    pub fn commands_said(&self) -> String {
        self.commands
            .iter()
            .map(|c| format!("`{}`", render(c)))
            .collect::<Vec<_>>()
            .join(", then ")
    }

    /// The whole step in one line: what, the commands, the cost, what it
    /// fixes; the step it waits for first.
    pub fn line(&self) -> String {
        let how = match (self.commands.is_empty(), &self.help) {
            (true, Some(h)) => format!(": {h}"),
            (true, None) => String::new(),
            (false, Some(h)) => format!(": {}, {h}", self.commands_said()),
            (false, None) => format!(": {}", self.commands_said()),
        };
        let after = self
            .after
            .as_ref()
            .map_or_else(String::new, |a| format!("{a}: "));
        let or = self.or.as_ref().map_or_else(String::new, |o| {
            format!("; or {}: {} ({})", o.short(), o.commands_said(), o.cost)
        });
        format!(
            "{after}{}{how} ({}; fixes {}){or}",
            self.short(),
            self.cost,
            self.fixes
        )
    }
}

/// The plan for a stack.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Why there is nothing for this tool on this machine (GPUs, none of
    /// them RDNA1, and no target asked for), when so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nothing: Option<String>,
}

impl Plan {
    pub fn first(&self, kind: Kind) -> Option<&Step> {
        self.steps.iter().find(|s| s.kind == kind)
    }

    /// The steps, numbered, one line each.
    pub fn lines(&self) -> Vec<String> {
        self.steps
            .iter()
            .enumerate()
            .map(|(i, s)| format!("step {} of {}: {}", i + 1, self.steps.len(), s.line()))
            .collect()
    }

    /// What the first line of a report adds: the count and the first
    /// step, where there is more than one.
    pub fn said(&self) -> Option<String> {
        match self.steps.len() {
            0 | 1 => None,
            n => Some(format!(
                "{n} steps, first {} (see route)",
                self.steps[0].short()
            )),
        }
    }
}

/// The cost of TheRock's torch: a download, no build.
pub const TORCH_COST: &str = "a download of about 4 GB, no build";

/// The plan for `f`.
pub fn plan(f: &Facts) -> Plan {
    if let Here::NoRdna1(others) = &f.here {
        return Plan {
            steps: Vec::new(),
            nothing: Some(format!(
                "no RDNA1 card in this machine ({}), so nothing for this tool to fix on it (--target gfx1010 prepares for one)",
                others.join(", ")
            )),
        };
    }
    let steps = match &f.torch {
        None => vec![
            torch_step(f, "no ROCm torch is there".to_owned()),
            after_torch(f),
        ],
        Some(t) => match torch_first(f, t) {
            Some(why) => vec![torch_step(f, why), after_torch(f)],
            None => for_this_torch(f, t),
        },
    };
    Plan {
        steps,
        nothing: None,
    }
}

/// Why the torch for every card comes first, if it does: torch runs
/// nothing where the runtime looks, or runs only under the override (its
/// own code lacks a card). None where torch has every card's own code
/// (an override that hides it is unset instead).
fn torch_first(f: &Facts, t: &TorchFacts) -> Option<String> {
    let seen = f.overridden.as_ref().map(|(_, target)| target.as_str());
    let lacks = |target: &dyn Fn(&str) -> String| -> Vec<String> {
        f.cards
            .iter()
            .filter(|c| t.covers(&target(c)) == Some(false))
            .cloned()
            .collect()
    };
    let runtime_lacks = lacks(&|c| seen.unwrap_or(c).to_owned());
    let own_lacks = lacks(&|c| c.to_owned());
    if hidden(f, t) || (runtime_lacks.is_empty() && (seen.is_none() || own_lacks.is_empty())) {
        return None;
    }
    Some(match (seen, f.overridden.as_ref()) {
        (Some(target), Some((v, _))) if t.covers(target) == Some(true) => format!(
            "torch has no code for {} itself, so it runs only under HSA_OVERRIDE_GFX_VERSION={v}, where MIOpen sees {target} and no fix of this tool acts",
            and(&own_lacks)
        ),
        _ if runtime_lacks.is_empty() => format!("torch runs nothing on {}", and(&own_lacks)),
        _ => format!("torch runs nothing on {}", and(&runtime_lacks)),
    })
}

/// Whether torch has every card's own code and the override hides it.
fn hidden(f: &Facts, t: &TorchFacts) -> bool {
    f.overridden.is_some() && t.code.is_some() && f.cards.iter().all(|c| t.covers(c) == Some(true))
}

/// The steps for the torch there is: the override unset where it hides
/// torch's own code, rocBLAS for the cards it lacks, MIOpen's fix.
fn for_this_torch(f: &Facts, t: &TorchFacts) -> Vec<Step> {
    let mut steps = Vec::new();
    let unset = hidden(f, t);
    if let (true, Some((v, target))) = (unset, &f.overridden) {
        steps.push(Step {
            kind: Kind::Override,
            fixes: format!(
                "MIOpen seeing {target} instead of {}: torch has their own code",
                and(&f.cards)
            ),
            cards: f.cards.clone(),
            cost: "nothing".to_owned(),
            commands: vec![Cmd::new("unset", &["HSA_OVERRIDE_GFX_VERSION"])],
            help: Some(format!("while it is {v}, ROCm loads {target} code")),
            after: None,
            or: None,
        });
    }
    if !t.rocblas_lacks.is_empty() {
        let s = rocblas_step(f, t);
        // A torch in its place: what its MIOpen needs is judged on it.
        if s.replaces_torch() {
            steps.push(s);
            steps.push(after_torch(f));
            return steps;
        }
        steps.push(s);
    }
    match (&t.miopen, unset) {
        (Miopen::Fails { .. } | Miopen::Judging, false) => steps.push(miopen_step(f, &t.miopen)),
        (Miopen::Fine, _) | (Miopen::Unknown, false) => {}
        (_, true) => {
            let mut m = miopen_step(f, &t.miopen);
            m.after = Some("after unsetting HSA_OVERRIDE_GFX_VERSION, run doctor again".to_owned());
            steps.push(m);
        }
    }
    steps
}

/// TheRock's torch for every card the plan is for: one line, every device.
fn torch_step(f: &Facts, fixes: String) -> Step {
    let words = match &f.missing {
        Some((asked, installed)) => {
            crate::torch::get::commands(&f.cards, asked.as_ref(), *installed)
        }
        None => vec![
            ["pip", "install"]
                .iter()
                .map(|w| (*w).to_owned())
                .chain(crate::torch::index_args())
                .chain(crate::torch::requirements(&f.cards))
                .collect(),
        ],
    };
    Step {
        kind: Kind::Torch,
        fixes,
        cards: f.cards.clone(),
        cost: TORCH_COST.to_owned(),
        commands: words
            .into_iter()
            .filter_map(|w| {
                let (program, args) = w.split_first()?;
                Some(Cmd {
                    program: program.clone(),
                    args: args.to_vec(),
                })
            })
            .collect(),
        help: match (&f.overridden, &f.missing) {
            (Some(_), _) => Some("then run torch without HSA_OVERRIDE_GFX_VERSION".to_owned()),
            (None, Some((Some(a), _))) if a.managed => Some(format!(
                "then use --python {}",
                crate::torch::get::VENV_PYTHON
            )),
            _ => None,
        },
        after: None,
        or: None,
    }
}

/// What waits for the torch step: its MIOpen judged, and fixed where its
/// batch norm fails.
fn after_torch(f: &Facts) -> Step {
    Step {
        kind: Kind::Miopen,
        fixes: "batch-norm training, where that torch's MIOpen fails it".to_owned(),
        cards: f.cards.clone(),
        cost: "seconds, in place".to_owned(),
        commands: vec![Cmd::tool(&["install", "--into-torch"])],
        help: None,
        after: Some(format!(
            "after the torch for {}, run doctor again",
            and(&f.cards)
        )),
        or: None,
    }
}

fn rocblas_step(f: &Facts, t: &TorchFacts) -> Step {
    let cards = t.rocblas_lacks.clone();
    let fixes = format!(
        "every matmul on {} (mm, bmm, linear, addmm, einsum, MIOpen's GEMM convolutions)",
        and(&cards)
    );
    let build = Step {
        kind: Kind::Rocblas,
        fixes: fixes.clone(),
        cards: cards.clone(),
        cost: t
            .rocblas_cost
            .clone()
            .unwrap_or_else(|| "a build of about 1.5 hours".to_owned()),
        commands: match &t.rocblas_profile {
            Some(p) => vec![
                Cmd::tool(&["build", "rocblas", "--profile", p]),
                Cmd::tool(&["install", "rocblas", "--into-torch"]),
            ],
            None => Vec::new(),
        },
        help: None,
        after: None,
        or: None,
    };
    let therock = || {
        let mut s = torch_step(f, fixes.clone());
        s.fixes = fixes.clone();
        s
    };
    match (&t.origin, build.commands.is_empty()) {
        // Its user built it: this tool builds its rocBLAS.
        (Origin::SelfBuilt, false) => build,
        // pytorch.org's wheel: both ways, each with its cost.
        (Origin::PytorchOrg, false) => Step {
            or: Some(Box::new(therock())),
            ..build
        },
        // No profile builds rocBLAS for torch's line, or TheRock's own.
        _ => Step {
            kind: Kind::Rocblas,
            ..therock()
        },
    }
}

fn miopen_step(f: &Facts, m: &Miopen) -> Step {
    let (cards, route) = match m {
        Miopen::Fails { cards, route } => (cards.clone(), route.clone()),
        Miopen::Judging => (f.cards.clone(), MiopenRoute::Judging),
        _ => (f.cards.clone(), MiopenRoute::InPlace),
    };
    let (cost, commands, help) = match route {
        MiopenRoute::InPlace => (
            "seconds, in place, proven by compiling before anything is written".to_owned(),
            vec![Cmd::tool(&["install", "--into-torch"])],
            None,
        ),
        MiopenRoute::Judging => (
            "seconds: its kernels judged by compiling, and fixed where they fail".to_owned(),
            vec![Cmd::tool(&["install", "--into-torch"])],
            None,
        ),
        MiopenRoute::Refused(help) => ("a build".to_owned(), Vec::new(), Some(help)),
    };
    Step {
        kind: Kind::Miopen,
        fixes: format!("batch-norm training on {}", and(&cards)),
        cards,
        cost,
        commands,
        help,
        after: None,
        or: None,
    }
}

#[cfg(test)]
mod tests;
