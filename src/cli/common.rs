//! What the commands share: the backend options ([`Common`]) and the
//! configuration they make with the file and the environment.

use std::path::{Path, PathBuf};

use clap::Args;
use toki_app::{BackendKind, Config};

#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Data folder of the embedded backend.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Backend family.
    #[arg(long, value_parser = clap::value_parser!(BackendKind))]
    pub backend: Option<BackendKind>,
}

/// The configuration (file, environment), with `common`'s flags over it.
pub fn config_with(cli_config: Option<&Path>, common: &Common) -> anyhow::Result<Config> {
    let mut config = Config::load(cli_config)?;
    if let Some(d) = &common.data_dir {
        config.data_dir = d.clone();
    }
    if let Some(b) = common.backend {
        config.backend = b;
    }
    config.validate()?;
    Ok(config)
}
