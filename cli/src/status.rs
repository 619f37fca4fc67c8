//! `shmrc status`: the manager's counters and clients, as a table or one JSON object;
//! and the one-line manager summary `ls` and `sweep` print.

use shmrc::Result;
use shmrc::manager::ManagerStatus;

use crate::table::{Table, age};

/// Runs `shmrc status`.
pub fn run(json: bool) -> Result<()> {
    let status = shmrc::manager::status()?;
    if json {
        println!("{}", to_json(&status));
        return Ok(());
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

fn to_json(s: &ManagerStatus) -> String {
    let rows: Vec<String> = s
        .rows
        .iter()
        .map(|r| {
            let namespaces: Vec<String> = r.namespaces.iter().map(|n| json_string(n)).collect();
            format!(
                "{{\"pid\":{},\"connected\":{},\"namespaces\":[{}]}}",
                r.pid,
                r.connected,
                namespaces.join(",")
            )
        })
        .collect();
    format!(
        "{{\"pid\":{},\"uptime_ms\":{},\"runtime_dir\":{},\"clients\":{},\"clients_ever\":{},\
         \"sweeps\":{},\"reclaimed\":{},\"unlinked\":{},\"refused\":{},\"client_list\":[{}]}}",
        s.pid,
        s.uptime_ms,
        json_string(&s.runtime_dir),
        s.clients,
        s.clients_ever,
        s.sweeps,
        s.reclaimed,
        s.unlinked,
        s.refused,
        rows.join(",")
    )
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
