//! The machine a run measures on: its CPU, cores, redis-server version and load.

/// What the results are measured on.
pub struct Machine {
    cpu: String,
    cores: usize,
    redis: String,
    load_before: String,
}

impl Machine {
    /// Reads what this machine is now.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|line| {
                line.strip_prefix("model name")
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let redis = std::process::Command::new(
            std::env::var("QUORUMLOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned()),
        )
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| {
            text.split_whitespace()
                .find(|word| word.starts_with("v="))
                .map(|v| v[2..].to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            redis,
            load_before: loadavg(),
        }
    }

    /// One line for the output and the results document.
    pub fn describe(&self) -> String {
        format!(
            "machine: {} core(s), {}; redis-server {}; load average at start {}",
            self.cores, self.cpu, self.redis, self.load_before
        )
    }
}

/// The load averages over 1, 5 and 15 minutes, as `/proc/loadavg` gives them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".to_owned())
}
