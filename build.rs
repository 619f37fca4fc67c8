//! Build-time switches of the library:
//!
//! - The checkers' builds: the features `loom` and `shuttle` (Cargo.toml says why they
//!   are not user builds) become `cfg(shmrc_loom)` and `cfg(shmrc_shuttle)`, the names
//!   the code tests, for every target of this package, its doc examples included.
//! - Planted bugs for the checkers (docs/VERIFICATION.md, "Checks that have failed";
//!   `.ci/planted-bugs`): `SHMRC_PLANT=NAME cargo test ...` builds this package with
//!   `cfg(shmrc_plant = "NAME")`, one known bug compiled in, so that a checker can be
//!   shown to fail. Only this package and what depends on it are rebuilt per plant (a
//!   cfg in RUSTFLAGS would rebuild every dependency too). Unset, as in every normal
//!   build, it changes nothing.

use std::env;

fn main() {
    for (feature, cfg) in [("LOOM", "shmrc_loom"), ("SHUTTLE", "shmrc_shuttle")] {
        let by_feature = env::var_os(format!("CARGO_FEATURE_{feature}")).is_some();
        // The form before the features: `RUSTFLAGS="--cfg shmrc_loom"` alone would build
        // without loom's crate and fail far from the cause.
        let by_flag = env::var_os(format!("CARGO_CFG_{}", cfg.to_uppercase())).is_some();
        if by_flag && !by_feature {
            panic!(
                "`--cfg {cfg}` is set without the feature: build the checkers' {} model with \
                 `cargo test --features {}` (docs/VERIFICATION.md)",
                feature.to_lowercase(),
                feature.to_lowercase()
            );
        }
        if by_feature {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    println!("cargo::rerun-if-env-changed=SHMRC_PLANT");
    if let Ok(plant) = env::var("SHMRC_PLANT") {
        if !plant.is_empty() {
            println!("cargo::rustc-cfg=shmrc_plant=\"{plant}\"");
            println!("cargo::rustc-env=SHMRC_PLANTED={plant}");
        }
    }
}
