//! Working out what a build would do, touching nothing: the prefix, the
//! series, the toolchain's compat fixes, the GPU targets, the compiler.

use super::*;

impl Options {
    pub(super) fn plan(&self) -> Result<BuildPlan<'_>> {
        let component = self.profile.component(&self.component)?;
        let mut series =
            Series::for_build(&self.profile, component, self.extra_patches.as_deref())?;
        let absolute =
            |p: &Path| std::path::absolute(p).with_context(|| format!("bad path {}", p.display()));
        let prefix = match &self.prefix {
            Some(p) => absolute(p)?,
            None => absolute(&self.profile.install_prefix_for(&self.component)?)?,
        };
        let rocm = absolute(self.rocm.as_deref().unwrap_or(&self.profile.rocm.path))?;
        let launcher =
            crate::builder::launcher::resolve(self.launcher.or(component.cmake.launcher))?;
        let with: Vec<With> = component
            .with
            .iter()
            .map(|(name, source)| With {
                name: name.clone(),
                source: source.clone(),
                dirs: self.work_dir.component(&self.profile.name, name),
            })
            .collect();
        let places: Vec<(&str, &Path)> = with
            .iter()
            .map(|w| (w.name.as_str(), w.dirs.src.as_path()))
            .collect();
        let mut defines = component
            .cmake
            .expanded_defines(&rocm, &places, &self.defines);
        let asked = defines.clone();
        let source_patches = series.patches.len();
        let compat = self.meet_compat(component, &rocm, &mut series, &mut defines)?;
        // One question to hipconfig serves the compiler and Tensile's tools.
        let hip = tools::HipClang::new(&rocm);
        let compiler_note = self.find_hip_clang(&hip, &mut defines);
        // Tensile, built beside a library (rocBLAS), runs an assembler and
        // a bundler of its own finding.
        let tensile_tools = tensile_tools(&with, &hip);
        let targets_note = self.choose_gpu_targets(&mut defines);
        // The profile's and the user's own launcher defines win.
        for (k, v) in launcher.iter().flat_map(|l| l.defines()) {
            defines.entry(k).or_insert(v);
        }
        let generator = match self.generator {
            Some(g) => g,
            None => Generator::parse(&component.cmake.generator).ok_or_else(|| {
                hint(
                    format!(
                        "profile {} asks for generator `{}`",
                        self.profile.name, component.cmake.generator
                    ),
                    "use \"Ninja\" or \"Unix Makefiles\"",
                )
            })?,
        };
        Ok(BuildPlan {
            opts: self,
            component,
            source: component.source(),
            with,
            series,
            tree: self
                .work_dir
                .component(&self.profile.name, &self.component)
                .project(component.subdir.as_deref()),
            dirs: self.work_dir.component(&self.profile.name, &self.component),
            lock_file: self.work_dir.lock_file(&self.profile.name),
            prefix,
            rocm,
            defines,
            generator,
            jobs: self
                .jobs
                .or_else(|| launcher.as_ref().and_then(|l| l.jobs()))
                .unwrap_or_else(crate::checksum::default_jobs)
                .max(1),
            launcher,
            compiler_note,
            tensile_tools,
            targets_note,
            compat,
            asked,
            source_patches,
        })
    }

    /// What the toolchain at `rocm` needs of this build (a distribution's
    /// ROCm: Boost 1.92, half.hpp where MIOpen does not look, comgr 3),
    /// among the fixes the profile lists: compat series go after the
    /// profile's, defines into `defines`.
    fn meet_compat(
        &self,
        component: &crate::builder::profile::Component,
        rocm: &Path,
        series: &mut Series,
        defines: &mut std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<crate::builder::compat::Need>> {
        use crate::builder::compat::{self, Fix};
        let needs = compat::needs(
            &compat::read(rocm),
            &component.compat,
            &self.no_compat,
            defines,
            &self.defines,
            &self.work_dir.profile_dir(&self.profile.name),
        )?;
        for n in &needs {
            match &n.fix {
                Fix::Series(name) => {
                    series.append(Series::load(&Profile::compat_series(name)?)?)?;
                }
                Fix::Define { key, value, .. } => {
                    defines.insert(key.clone(), value.display().to_string());
                }
            }
        }
        Ok(needs)
    }

    /// GPU_TARGETS: `--gpu-targets`, else a `-D` of the user's, else the
    /// RDNA1 cards of this machine, else the profile's (every gfx101x: a
    /// build machine without the card). MIOpen compiles its GPU kernels at
    /// run time for the card it finds; GPU_TARGETS only adds offload code to
    /// every host file, so each arch not needed costs build time and nothing
    /// else.
    fn choose_gpu_targets(
        &self,
        defines: &mut std::collections::BTreeMap<String, String>,
    ) -> String {
        const KEY: &str = "GPU_TARGETS";
        if let Some(list) = &self.gpu_targets {
            let value = list.join(";");
            defines.insert(KEY.into(), value.clone());
            let other: Vec<&str> = list
                .iter()
                .map(String::as_str)
                .filter(|t| !crate::gpu::is_rdna1_arch(t))
                .collect();
            if other.is_empty() {
                return format!("{value} (--gpu-targets)");
            }
            return format!(
                "{value} (--gpu-targets); {} not RDNA1 (gfx1010, gfx1011, gfx1012): check the name, since RX 5000 cards run only code built for those",
                if other.len() == 1 {
                    format!("{} is", other[0])
                } else {
                    format!("{} are", other.join(", "))
                }
            );
        }
        if self.defines.iter().any(|(k, _)| k == KEY) {
            return format!(
                "{} (-D {KEY})",
                defines.get(KEY).cloned().unwrap_or_default()
            );
        }
        let Some(profile_value) = defines.get(KEY).cloned() else {
            return "the project's default (the profile sets no GPU_TARGETS)".into();
        };
        let scan = crate::gpu::scan_all(&self.sysfs);
        let found = scan.rdna1_targets();
        let unread = scan.problems.len();
        let unread = if unread == 0 {
            String::new()
        } else {
            format!(", {unread} node(s) of it unreadable: `rdna1-patch doctor` says which")
        };
        if found.is_empty() {
            return format!(
                "{profile_value} (the profile's: no RDNA1 card in the KFD topology{unread}; --gpu-targets to choose)"
            );
        }
        let value = found.join(";");
        defines.insert(KEY.into(), value.clone());
        format!("{value} (the RDNA1 card(s) in the KFD topology{unread}; --gpu-targets to choose)")
    }

    /// The profile names AMD's layout (`{rocm}/llvm/bin/amdclang++`); a
    /// distribution puts HIP's clang elsewhere. When the profile's compiler
    /// is not there and `-D` did not name one, use the clang
    /// `hipconfig --hipclangpath` names, and say so.
    fn find_hip_clang(
        &self,
        hip: &tools::HipClang,
        defines: &mut std::collections::BTreeMap<String, String>,
    ) -> Option<String> {
        let given = |k: &str| self.defines.iter().any(|(d, _)| d == k);
        let cxx = defines.get("CMAKE_CXX_COMPILER")?;
        if given("CMAKE_CXX_COMPILER") {
            return None;
        }
        let tools::CxxChoice::HipClang(dir) = tools::choose_cxx(cxx, hip) else {
            return None;
        };
        let was = cxx.clone();
        defines.insert(
            "CMAKE_CXX_COMPILER".into(),
            dir.join("clang++").display().to_string(),
        );
        if !given("CMAKE_C_COMPILER")
            && defines
                .get("CMAKE_C_COMPILER")
                .is_some_and(|c| !Path::new(c).exists())
        {
            defines.insert(
                "CMAKE_C_COMPILER".into(),
                dir.join("clang").display().to_string(),
            );
        }
        Some(format!(
            "{was} is not there; using HIP's clang in {} (hipconfig --hipclangpath)",
            dir.display()
        ))
    }
}

/// [`tools::tensile_tools`] for a build that fetches Tensile beside it.
fn tensile_tools(
    with: &[With],
    hip: &tools::HipClang,
) -> Option<(PathBuf, Vec<(String, PathBuf)>)> {
    with.iter()
        .any(|w| w.name == "tensile")
        .then(|| tools::tensile_tools(hip))
        .flatten()
}
