//! What `ullstack serve --check` prints: the effective config as a TOML-like summary, with
//! every secret redacted.
//!
//! The check is run by operators in shells, CI logs and tickets, so it must not carry what the
//! config file keeps `0600`: tenants' secrets print as `secret = "(redacted)"`, and a registry
//! URL's `user:password@` as `(redacted)@`. Key files (`[tls] psk_file`, `key`) print as their
//! paths; they are never read here. Everything else prints with its effective value, defaults
//! included, in the config's own key names, so the output answers "what will this server do"
//! (an inline QoS profile or device table is summarized, not expanded; `[qos.tuning]` prints as
//! one comment line; the profile in use and the one each volume is priced with print as comments,
//! so `profile = "auto"` shows what it chose). Worked example: the quick start's tenant prints as
//!
//! ```toml
//! [[tenant]]
//! name = "open"
//! open = true
//! class = "be"
//! acl = [{ volume = "default", access = "read-write" }]
//! ```
//!
//! `TenantConfig`'s `Debug` redacts the secret too, so a config logged or printed by accident
//! does not leak it either.

use std::fmt::Write;

use super::{
    Access, BackendConfig, DeviceSpec, IdlePolicy, ProfileConfig, SchedulerMode, ServerConfig,
    VrateMode,
};

/// How a secret prints.
pub const REDACTED: &str = "(redacted)";

/// A URL with any `user:password@` before its host replaced by [`REDACTED`].
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let redacted = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{REDACTED}{}", &rest[at..]),
        None => rest.to_owned(),
    };
    match scheme {
        Some(s) => format!("{s}://{redacted}"),
        None => redacted,
    }
}

impl ServerConfig {
    /// The effective config as TOML-like text, secrets redacted (see the module essay).
    pub fn summary_toml(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_summary(&mut out);
        out
    }

    fn write_summary(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "[listen]")?;
        for (key, addr) in [
            ("native", self.listen.native),
            ("nbd", self.listen.nbd),
            ("admin", self.listen.admin),
        ] {
            match addr {
                Some(a) => writeln!(out, "{key} = \"{a}\"")?,
                None => writeln!(out, "# {key}: off")?,
            }
        }
        let d = &self.dataplane;
        writeln!(out, "\n[dataplane]")?;
        writeln!(out, "workers = {}", d.workers)?;
        writeln!(out, "batch_limit = {}", d.batch_limit)?;
        let idle = match d.idle {
            IdlePolicy::Spin => "spin",
            IdlePolicy::BlockAfterSpin => "block-after-spin",
        };
        writeln!(out, "idle = \"{idle}\"")?;
        writeln!(out, "idle_spin_ns = {}", d.idle_spin_ns)?;
        writeln!(out, "coalesce_ns = {}", d.coalesce_ns)?;
        writeln!(out, "socket_io = \"{}\"", d.socket_io.name())?;
        writeln!(out, "socket_recv = \"{}\"", d.socket_recv.name())?;
        writeln!(out, "ring_wait = \"{}\"", d.ring_wait.name())?;
        writeln!(out, "ring_spin = \"{}\"", d.ring_spin.name())?;
        writeln!(out, "ring_sqpoll_idle_ms = {}", d.ring_sqpoll_idle_ms)?;
        writeln!(out, "file_io = \"{}\"", d.file_io.name())?;
        writeln!(out, "send_zc = {}", d.send_zc.name())?;
        self.write_limits(out)?;
        self.write_qos(out)?;
        if let Some(tls) = &self.tls {
            writeln!(out, "\n[tls]")?;
            for (key, path) in [
                ("psk_file", &tls.psk_file),
                ("certificate", &tls.certificate),
                ("key", &tls.key),
            ] {
                if let Some(p) = path {
                    writeln!(out, "{key} = {:?}", p.display().to_string())?;
                }
            }
        }
        writeln!(out, "\n[admin]")?;
        match &self.admin.token {
            Some(_) => writeln!(out, "token = \"{REDACTED}\"  # POST /reload on")?,
            None => writeln!(out, "# token: off (POST /reload refused)")?,
        }
        self.write_volumes(out)?;
        self.write_tenants(out)?;
        for e in &self.exports {
            writeln!(out, "\n[[export]]")?;
            writeln!(out, "name = {:?}", e.name)?;
            writeln!(out, "volume = {:?}", e.volume)?;
            writeln!(out, "tenant = {:?}", e.tenant)?;
            if let Some(text) = &e.description {
                writeln!(out, "description = {text:?}")?;
            }
        }
        if let Some(r) = &self.registry {
            writeln!(out, "\n[registry]")?;
            writeln!(out, "url = {:?}", redact_url(&r.url))?;
            if let Some(id) = &r.id {
                writeln!(out, "id = {id:?}")?;
            }
            writeln!(out, "ttl_s = {}", r.ttl_s)?;
        }
        Ok(())
    }

    fn write_limits(&self, out: &mut String) -> std::fmt::Result {
        let l = &self.limits;
        writeln!(out, "\n[limits]")?;
        writeln!(out, "max_connections = {}", l.max_connections)?;
        writeln!(
            out,
            "max_connections_per_tenant = {}",
            l.max_connections_per_tenant
        )?;
        writeln!(out, "max_inflight_requests = {}", l.max_inflight_requests)?;
        writeln!(out, "max_inflight_bytes = {}", l.max_inflight_bytes.0)?;
        writeln!(out, "max_request_bytes = {}", l.max_request_bytes.0)?;
        writeln!(out, "max_memory_bytes = {}", l.max_memory_bytes.0)?;
        writeln!(out, "idle_timeout_ms = {}", l.idle_timeout_ms)?;
        writeln!(out, "handshake_timeout_ms = {}", l.handshake_timeout_ms)?;
        writeln!(out, "request_timeout_ms = {}", l.request_timeout_ms)?;
        writeln!(out, "shutdown_grace_ms = {}", l.shutdown_grace_ms)?;
        writeln!(
            out,
            "max_unauthenticated_connections = {}",
            l.unauthenticated_budget()
        )?;
        writeln!(
            out,
            "max_unauthenticated_per_source = {}",
            l.max_unauthenticated_per_source
        )?;
        writeln!(
            out,
            "accepts_per_source_per_sec = {}",
            l.accepts_per_source_per_sec
        )?;
        writeln!(
            out,
            "max_open_sessions_per_source = {}",
            l.open_sessions_per_source()
        )
    }

    fn write_qos(&self, out: &mut String) -> std::fmt::Result {
        let q = &self.qos;
        writeln!(out, "\n[qos]")?;
        let scheduler = match q.scheduler {
            SchedulerMode::On => "on",
            SchedulerMode::Off => "off",
        };
        writeln!(out, "scheduler = \"{scheduler}\"")?;
        match &q.profile {
            ProfileConfig::Named(name) => writeln!(out, "profile = {name:?}")?,
            ProfileConfig::Inline(table) => writeln!(
                out,
                "# profile: an inline [qos.profile] table of {} keys",
                table.len()
            )?,
        }
        if let Ok(choice) = self.profile_choice() {
            writeln!(
                out,
                "# profile in use: {:?} ({})",
                choice.profile.name,
                choice.source.reason()
            )?;
        }
        let vrate = match q.vrate {
            VrateMode::On => "on",
            VrateMode::Off => "off",
        };
        writeln!(out, "vrate = \"{vrate}\"")?;
        writeln!(out, "vrate_window_ms = {}", q.vrate_window_ms)?;
        writeln!(out, "lc_surge_pct = {}", q.lc_surge_pct)?;
        writeln!(out, "# tuning: {:?}", q.tuning)?;
        writeln!(out, "# vrate_tuning: {:?}", q.vrate_tuning)
    }

    fn write_volumes(&self, out: &mut String) -> std::fmt::Result {
        for v in &self.volumes {
            writeln!(out, "\n[[volume]]")?;
            writeln!(out, "name = {:?}", v.name)?;
            writeln!(out, "block_bytes = {}", v.block_bytes)?;
            match &v.backend {
                BackendConfig::Memory { size } => {
                    writeln!(out, "backend = {{ kind = \"memory\", size = {} }}", size.0)?
                }
                BackendConfig::File {
                    path,
                    size,
                    direct,
                    fixed_buffers,
                } => {
                    write!(
                        out,
                        "backend = {{ kind = \"file\", path = {:?}",
                        path.display().to_string()
                    )?;
                    if let Some(size) = size {
                        write!(out, ", size = {}", size.0)?;
                    }
                    writeln!(
                        out,
                        ", direct = \"{}\", fixed_buffers = {fixed_buffers} }}",
                        format!("{direct:?}").to_lowercase()
                    )?
                }
                BackendConfig::Emulated {
                    device,
                    size,
                    sq_depth,
                } => {
                    let device = match device {
                        DeviceSpec::Named(name) => format!("{name:?}"),
                        DeviceSpec::Inline(t) => format!("\"(inline table of {} keys)\"", t.len()),
                    };
                    writeln!(
                        out,
                        "backend = {{ kind = \"emulated\", device = {device}, size = {}, sq_depth = {sq_depth} }}",
                        size.0
                    )?
                }
            }
        }
        // Which profile prices each volume, as `serve` logs it at start-up.
        if let Ok(lines) = self.volume_profile_lines() {
            writeln!(out)?;
            for line in lines {
                writeln!(out, "# {line}")?;
            }
        }
        Ok(())
    }

    fn write_tenants(&self, out: &mut String) -> std::fmt::Result {
        for t in &self.tenants {
            writeln!(out, "\n[[tenant]]")?;
            writeln!(out, "name = {:?}", t.name)?;
            if t.open {
                writeln!(out, "open = true")?;
            }
            if t.secret.is_some() {
                writeln!(out, "secret = \"{REDACTED}\"")?;
            }
            writeln!(out, "class = \"{}\"", t.class)?;
            if let Some(slo) = &t.slo {
                writeln!(
                    out,
                    "slo = {{ p95_read_latency_us = {}, iops = {}, read_ratio_pct = {}, request_bytes = {} }}",
                    slo.p95_read_latency_us, slo.iops, slo.read_ratio_pct, slo.request_bytes.0
                )?;
            }
            let acl: Vec<String> = t
                .acl
                .iter()
                .map(|a| {
                    let access = match a.access {
                        Access::ReadOnly => "read",
                        Access::ReadWrite => "read-write",
                    };
                    let ranges = a
                        .lba_ranges
                        .as_ref()
                        .map(|r| format!(", lba_ranges = {r:?}"))
                        .unwrap_or_default();
                    format!(
                        "{{ volume = {:?}, access = \"{access}\"{ranges} }}",
                        a.volume
                    )
                })
                .collect();
            writeln!(out, "acl = [{}]", acl.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_only() {
        assert_eq!(
            redact_url("http://user:pw@etcd:2379/x"),
            "http://(redacted)@etcd:2379/x"
        );
        assert_eq!(redact_url("http://etcd:2379"), "http://etcd:2379");
        assert_eq!(redact_url("http://etcd:2379/a@b"), "http://etcd:2379/a@b");
    }
}
