//! Configuration: defaults that run the embedded mode, then a TOML file
//! (`--config`, `TOKI_CONFIG`, or `toki.toml` in the working directory),
//! then `TOKI_*` environment variables, then command-line flags.
//!
//! The sections and their defaults are in [`types`]; the environment's
//! variables are a table in [`env`]; the checks are in [`validate`].

mod env;
mod types;
mod validate;

use std::path::{Path, PathBuf};

use anyhow::Context;

pub use types::{
    AwsConfig, BackendKind, Config, DaemonConfig, DatabaseConfig, HttpConfig, MailConfig,
    MailTransport, PipelineConfig, RepairConfig, Secret, SlackConfig,
};

impl Config {
    /// Loads defaults, then the file, then the environment.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let path = file
            .map(Path::to_path_buf)
            .or_else(|| env::var("TOKI_CONFIG").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from("toki.toml")).filter(|p| p.exists()));
        let mut config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                toml::from_str(&text).with_context(|| format!("config file {}", p.display()))?
            }
            None => Config::default(),
        };
        env::apply(&mut config)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the configuration, and fills in what follows from the rest
    /// (see [`validate`]).
    pub fn validate(&mut self) -> anyhow::Result<()> {
        validate::validate(self)
    }
}
