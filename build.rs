//! Planted bugs for the checkers (docs/VERIFICATION.md, "Checks that have failed";
//! `.ci/planted-bugs`): `SHMRC_PLANT=NAME cargo test ...` builds this package with
//! `cfg(shmrc_plant = "NAME")`, one known bug compiled in, so that a checker can be shown
//! to fail. Only this package and what depends on it are rebuilt per plant (a cfg in
//! RUSTFLAGS would rebuild every dependency too). Unset, as in every normal build, it
//! changes nothing.

fn main() {
    println!("cargo::rerun-if-env-changed=SHMRC_PLANT");
    if let Ok(plant) = std::env::var("SHMRC_PLANT") {
        if !plant.is_empty() {
            println!("cargo::rustc-cfg=shmrc_plant=\"{plant}\"");
            println!("cargo::rustc-env=SHMRC_PLANTED={plant}");
        }
    }
}
