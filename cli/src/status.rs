//! `shmrc status`: the manager's counters and clients, as a table or one JSON object;
//! and the one-line manager summary `ls` and `sweep` print.

use crate::table::{Table, age};

use crate::error::Result;
use crate::output::print_json;

/// `shmrc status --json`: `{"running": false}` when no manager runs (the normal idle
/// state), else `{"running": true, "pid": …, …}`.
#[derive(serde::Serialize)]
struct StatusDoc<'a> {
    running: bool,
    #[serde(flatten)]
    status: Option<&'a shmrc::manager::ManagerStatus>,
}

/// Runs `shmrc status`. No manager running is an answer, not a failure (exit 0); a
/// manager that cannot be asked (a runtime directory that cannot be read, a reply out
/// of step) is a failure.
pub fn run(json: bool) -> Result<()> {
    let status = match shmrc::manager::status() {
        Ok(status) => status,
        Err(shmrc::Error::NoManager { .. }) => {
            if json {
                let doc = StatusDoc {
                    running: false,
                    status: None,
                };
                return print_json(&doc, false);
            }
            println!("no manager running (one starts when a program first needs it)");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        // One line: `{"running":true,"pid":…,"uptime_ms":…,…,"client_list":[…]}`.
        let doc = StatusDoc {
            running: true,
            status: Some(&status),
        };
        return print_json(&doc, false);
    }
    let mut summary = Table::new(["MANAGER", ""]);
    for (key, value) in [
        ("pid", status.pid.to_string()),
        ("uptime", age(status.uptime_ms.saturating_mul(1_000_000))),
        ("runtime dir", status.runtime_dir.clone()),
        ("clients now", status.clients.to_string()),
        ("clients ever", status.clients_ever.to_string()),
        ("sweeps", status.sweeps.to_string()),
        ("slots reclaimed", status.reclaimed.to_string()),
        ("segments unlinked", status.unlinked.to_string()),
        ("refusals", status.refused.to_string()),
    ] {
        summary.row([key.to_owned(), value]);
    }
    summary.print();
    if !status.rows.is_empty() {
        println!();
        let mut clients = Table::new(["CLIENT PID", "NAMESPACES", "CONNECTION"]);
        for row in &status.rows {
            clients.row([
                row.pid.to_string(),
                row.namespaces.join(","),
                if row.connected {
                    "open"
                } else {
                    "closed (watched)"
                }
                .to_owned(),
            ]);
        }
        clients.print();
    }
    Ok(())
}

/// "manager: pid N, K client(s)" or "no manager running".
pub fn manager_line() -> String {
    match shmrc::manager::status() {
        Ok(s) => format!("manager: pid {}, {} client(s)", s.pid, s.clients),
        Err(shmrc::Error::NoManager { .. }) => "no manager running".to_owned(),
        Err(e) => format!("manager: {e}"),
    }
}
