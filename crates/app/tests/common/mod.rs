//! What the app's in-process API tests share: a test kit with tenant `acme`
//! whose API key is [`KEY`].

use toki_app::api_key_hash;
use toki_core::testing::TestKit;
use toki_model::TenantRecord;
use toki_ports::TenantDirectory;

pub const KEY: &str = "toki_test_key";

pub async fn kit_with_tenant() -> TestKit {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.directory
        .put(&TenantRecord {
            id: t,
            reminders_enabled: true,
            active: true,
            database: "memory:acme".into(),
            api_key_sha256: api_key_hash(KEY),
            change_notices: Default::default(),
            limits: Default::default(),
        })
        .await
        .unwrap();
    kit
}
