//! PostgreSQL for the delivery log's tests, real servers only:
//! - [`TestDb`]: a database of the test's own on the machine's server (`127.0.0.1:5432`, or
//!   `ANKUSA_TEST_PG_URL`), created fresh and dropped at the end;
//! - [`PgCluster`]: a server of the test's own (`initdb` + `pg_ctl` on a free loopback port),
//!   which a test stops and starts again.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The machine's server, as the superuser (trust on loopback).
fn admin_url() -> String {
    std::env::var("ANKUSA_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A client of `url`, its connection driven on the current runtime.
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} answers (.ci/run starts it): {e}"));
    tokio::spawn(conn);
    c
}

/// A fresh database on the machine's PostgreSQL, dropped when this is.
pub struct TestDb {
    /// `postgres://…/<the database>`.
    pub url: String,
    name: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let name = format!("ankusa_{}", super::unique_instance().replace('-', "_"));
        let admin = admin_url();
        let c = client(&admin).await;
        // Two statements: DROP DATABASE and CREATE DATABASE refuse a transaction block.
        c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .expect("a leftover test database dropped");
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("test database created");
        let url = match admin.rfind('/') {
            Some(i) => format!("{}/{name}", &admin[..i]),
            None => panic!("ANKUSA_TEST_PG_URL names no database: {admin}"),
        };
        TestDb { url, name }
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        client(&self.url).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Its own thread and runtime: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok((c, conn)) =
                    tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = c
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            })
        })
        .join();
    }
}

/// The directory of PostgreSQL's server programs (`initdb`, `pg_ctl`).
fn bindir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if p.join("initdb").exists() {
            return p;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .filter(|p| p.join("initdb").exists())
        .expect("PostgreSQL's initdb and pg_ctl are installed (.ci/run installs postgresql)")
}

/// A PostgreSQL server of the test's own, stopped and removed when this is dropped.
pub struct PgCluster {
    dir: tempfile::TempDir,
    pub port: u16,
    bin: PathBuf,
}

/// Run a server program, as `postgres` when we are root (the server refuses root).
fn pg_cmd(bin: &std::path::Path, prog: &str, args: &[&str]) -> std::process::Output {
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(prog));
        c
    } else {
        Command::new(bin.join(prog))
    };
    cmd.args(args).output().expect("PostgreSQL program runs")
}

impl PgCluster {
    /// `initdb` (trust, superuser `postgres`) and start on a free loopback port.
    pub fn start() -> PgCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        if unsafe { libc::geteuid() } == 0 {
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs")
                .success();
            assert!(ok, "chown of the cluster's directory");
        }
        let bin = bindir();
        let data = dir.path().join("data");
        let out = pg_cmd(
            &bin,
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c = PgCluster {
            dir,
            port: super::free_port(),
            bin,
        };
        c.start_again();
        c
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    /// Start it (again), waiting until it accepts connections.
    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let out = pg_cmd(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// Stop it (fast: connections are cut), waiting until it is down.
    pub fn stop(&self) {
        let out = pg_cmd(
            &self.bin,
            "pg_ctl",
            &["-D", &self.data(), "-m", "fast", "-w", "stop"],
        );
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The URL of database `db` on it.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = pg_cmd(
            &self.bin,
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}
