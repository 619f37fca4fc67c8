//! The CLI's plain-text tables (`ls`, `sweep`, `status`, the demo's ledger) and its
//! human-readable sizes and ages.

/// A table printed with aligned columns.
pub struct Table<const N: usize> {
    header: [String; N],
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    /// A table with these column titles.
    pub fn new(header: [&str; N]) -> Table<N> {
        Table {
            header: header.map(str::to_owned),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, row: [String; N]) {
        self.rows.push(row);
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Prints the table to stdout.
    pub fn print(&self) {
        let mut widths = [0usize; N];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            println!("{}", line.join("  ").trim_end());
        }
    }
}

/// `1536` → `1.5 KiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Nanoseconds → `3.2s`, `4m05s`, `2h10m`.
pub fn age(nanos: u64) -> String {
    let secs = nanos / 1_000_000_000;
    match secs {
        0..60 => format!("{:.1}s", nanos as f64 / 1e9),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(64 << 20), "64.0 MiB");
        assert_eq!(age(3_200_000_000), "3.2s");
        assert_eq!(age(245_000_000_000), "4m05s");
        assert_eq!(age(7_800_000_000_000), "2h10m");
    }
}
