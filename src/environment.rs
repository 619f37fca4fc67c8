//! The process environment as shmrc reads it. Every variable the library reads
//! (`SHMRC_*`, `XDG_RUNTIME_DIR`) goes through [`var`], with `secure_getenv` semantics:
//! in a program the kernel started with privileges its caller lacks (setuid, setgid,
//! file capabilities: `AT_SECURE` in the auxiliary vector, [`runs_with_privileges`])
//! every variable reads as unset, since its caller chose them. A value that is set but
//! unusable (not Unicode, a relative path) is a [`BadVariable`] that names the variable
//! (an `Error::InvalidArgument` once it reaches the user); an empty one reads as unset.
//! It imports nothing of the crate, so that every module may read the environment.
//!
//! # Safety
//! One `unsafe` block: `getauxval(AT_SECURE)`, which reads the auxiliary vector the
//! kernel passed at exec (a plain integer argument, no precondition).
#![allow(unsafe_code)]
// A loom or shuttle build has no manager client, the reader of paths and programs.
#![cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]

use std::fmt;

/// A variable set to a value shmrc cannot use: its name, the value and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadVariable {
    /// What is wrong, the variable's name and value first.
    pub why: String,
}

impl fmt::Display for BadVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for BadVariable {}

type Result<T> = std::result::Result<T, BadVariable>;

/// The value of the variable `name`, if it is set to something other than the empty
/// string and this program runs without privileges its caller lacks. A value that is
/// not Unicode is an error naming the variable.
pub(crate) fn var(name: &str) -> Result<Option<String>> {
    if runs_with_privileges() {
        return Ok(None);
    }
    read(name, std::env::var(name))
}

/// The value of the variable `name` as the bytes it holds (a path, a program), if it is
/// set to something other than the empty string and this program runs without
/// privileges its caller lacks.
pub(crate) fn var_os(name: &str) -> Option<std::ffi::OsString> {
    if runs_with_privileges() {
        return None;
    }
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// The absolute path the variable `name` holds, if it is set (as [`var_os`] reads it);
/// a relative path is an error naming the variable, since processes in different
/// working directories would take it for different places.
pub(crate) fn absolute_path(name: &str) -> Result<Option<std::path::PathBuf>> {
    let Some(value) = var_os(name) else {
        return Ok(None);
    };
    let path = std::path::PathBuf::from(value);
    if path.is_relative() {
        return Err(BadVariable {
            why: format!(
                "{name}={path:?} is a relative path: set it to an absolute one (processes \
                 in other working directories would read it as another directory)"
            ),
        });
    }
    Ok(Some(path))
}

/// What [`var`] makes of `looked_up`, the plain lookup of `name`.
fn read(
    name: &str,
    looked_up: std::result::Result<String, std::env::VarError>,
) -> Result<Option<String>> {
    match looked_up {
        Ok(value) if value.is_empty() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(value)) => Err(BadVariable {
            why: format!("{name}={value:?} is not valid Unicode"),
        }),
    }
}

/// Whether the kernel started this program with privileges its caller lacks (setuid,
/// setgid, file capabilities): its environment is then its caller's to set, and shmrc
/// reads none of it.
pub(crate) fn runs_with_privileges() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel passed at exec; it takes
    // a plain integer, has no precondition, and returns 0 for an absent entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::VarError;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn an_unset_or_empty_variable_reads_as_unset() {
        assert_eq!(var("SHMRC_ENVIRONMENT_TEST_UNSET").unwrap(), None);
        assert_eq!(read("SHMRC_X", Err(VarError::NotPresent)).unwrap(), None);
        assert_eq!(read("SHMRC_X", Ok(String::new())).unwrap(), None);
    }

    #[test]
    fn a_set_variable_is_read() {
        let value = read("SHMRC_X", Ok("file_system".into())).unwrap();
        assert_eq!(value.as_deref(), Some("file_system"));
        // PATH is set wherever tests run, and this test program has no privileges.
        assert!(var("PATH").unwrap().is_some());
    }

    #[test]
    fn a_value_that_is_not_unicode_is_an_error_naming_the_variable() {
        let bad = std::ffi::OsString::from_vec(b"\xff\xfe".to_vec());
        let why = read("SHMRC_X", Err(VarError::NotUnicode(bad)))
            .unwrap_err()
            .to_string();
        assert!(why.contains("SHMRC_X"), "{why}");
    }

    #[test]
    fn a_test_runs_without_extra_privileges() {
        assert!(!runs_with_privileges());
    }
}
