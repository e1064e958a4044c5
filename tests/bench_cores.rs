//! `toki bench --cores`: separate gives the stand-in and the daemons disjoint
//! CPUs that together are the bench's own; shared leaves them as they are.

use toki_devtools::bench::{allowed_cpus, Cores, Role};

#[test]
fn separate_cores_split_the_machine_and_shared_leaves_it() {
    let cpus = allowed_cpus();
    assert!(!cpus.is_empty(), "this process runs somewhere");
    assert_eq!(Cores::Shared.cpus(Role::StandIn), None);
    assert_eq!(Cores::Shared.cpus(Role::Daemon), None);
    let (Some(standin), Some(daemons)) = (
        Cores::Separate.cpus(Role::StandIn),
        Cores::Separate.cpus(Role::Daemon),
    ) else {
        assert_eq!(cpus.len(), 1, "only a one-CPU machine is left shared");
        return;
    };
    assert_eq!(
        standin,
        vec![*cpus.last().unwrap()],
        "the stand-in: the last CPU"
    );
    let mut all = [daemons.clone(), standin.clone()].concat();
    all.sort();
    assert_eq!(all, cpus, "together, every CPU once");
    assert!(!daemons.contains(&standin[0]), "disjoint");
}

#[test]
fn cores_read_back_as_written() {
    for c in [Cores::Separate, Cores::Shared] {
        assert_eq!(c.to_string().parse::<Cores>(), Ok(c));
    }
    assert!("both".parse::<Cores>().unwrap_err().contains("--cores"));
}
