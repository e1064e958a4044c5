//! What the app's in-process API tests share: a test kit with tenant `acme`
//! whose API key is [`KEY`].

use toki_core::testing::TestKit;
use toki_model::api_key::ApiKey;
use toki_model::TenantRecord;
use toki_ports::{Clock, TenantDirectory};

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
            api_keys: vec![ApiKey::new(
                "default".parse().unwrap(),
                KEY,
                kit.clock.now(),
                None,
            )],
            change_notices: Default::default(),
            limits: Default::default(),
        })
        .await
        .unwrap();
    kit
}
