//! The address policy: each refused range, its IPv4-mapped form, the operator's exceptions, the URL checks.

use super::*;

fn refused(s: &str) -> Option<Refused> {
    classify(s.parse().unwrap())
}

#[test]
fn refuses_every_non_public_range_and_admits_public_addresses() {
    let cases = [
        ("127.0.0.1", Some(Refused::Loopback)),
        ("127.255.0.9", Some(Refused::Loopback)),
        ("10.1.2.3", Some(Refused::Private)),
        ("172.16.0.1", Some(Refused::Private)),
        ("172.31.255.255", Some(Refused::Private)),
        ("172.32.0.1", None),
        ("192.168.1.1", Some(Refused::Private)),
        ("100.64.0.1", Some(Refused::SharedAddressSpace)),
        ("100.127.255.254", Some(Refused::SharedAddressSpace)),
        ("100.128.0.1", None),
        ("169.254.169.254", Some(Refused::LinkLocal)),
        ("0.0.0.0", Some(Refused::Unspecified)),
        ("255.255.255.255", Some(Refused::Broadcast)),
        ("224.0.0.251", Some(Refused::Multicast)),
        ("192.0.2.7", Some(Refused::Documentation)),
        ("198.51.100.7", Some(Refused::Documentation)),
        ("203.0.113.7", Some(Refused::Documentation)),
        ("240.0.0.1", Some(Refused::Reserved)),
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("::1", Some(Refused::Loopback)),
        ("::", Some(Refused::Unspecified)),
        ("fd12:3456::1", Some(Refused::Private)),
        ("fc00::1", Some(Refused::Private)),
        ("fe80::1", Some(Refused::LinkLocal)),
        ("ff02::1", Some(Refused::Multicast)),
        ("2001:db8::1", Some(Refused::Documentation)),
        ("2606:4700:4700::1111", None),
        // IPv4-mapped, IPv4-compatible and NAT64 forms of refused addresses.
        ("::ffff:127.0.0.1", Some(Refused::Loopback)),
        ("::ffff:169.254.169.254", Some(Refused::LinkLocal)),
        ("::ffff:10.0.0.1", Some(Refused::Private)),
        ("::10.0.0.1", Some(Refused::Private)),
        ("64:ff9b::a9fe:a9fe", Some(Refused::LinkLocal)),
        ("::ffff:8.8.8.8", None),
    ];
    for (ip, want) in cases {
        assert_eq!(refused(ip), want, "{ip}");
    }
}

/// The IPv6 forms that carry or lead to an IPv4 host, and the space outside
/// global unicast (issue 59): each refused, whatever IPv4 address it carries.
#[test]
fn refuses_transition_and_mapped_forms_and_what_is_not_global_unicast() {
    let cases = [
        // IPv4-mapped (::ffff:0:0/96): judged as the IPv4 address it carries.
        ("::ffff:0.0.0.0", Some(Refused::Unspecified)),
        ("::ffff:192.168.0.1", Some(Refused::Private)),
        ("::ffff:100.64.0.1", Some(Refused::SharedAddressSpace)),
        ("::ffff:7f00:1", Some(Refused::Loopback)),
        ("::ffff:93.184.216.34", None),
        // 6to4 (2002::/16), a private, a public and a loopback IPv4 inside.
        ("2002:a00:1::1", Some(Refused::Transition)),
        ("2002:808:808::1", Some(Refused::Transition)),
        ("2002:7f00:1::", Some(Refused::Transition)),
        (
            "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Refused::Transition),
        ),
        // Teredo (2001::/32).
        ("2001::1", Some(Refused::Transition)),
        (
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            Some(Refused::Transition),
        ),
        (
            "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
            Some(Refused::Transition),
        ),
        // Local-use NAT64 (64:ff9b:1::/48), whatever it embeds.
        ("64:ff9b:1::808:808", Some(Refused::Transition)),
        ("64:ff9b:1:ffff::a00:1", Some(Refused::Transition)),
        // Well-known NAT64 (64:ff9b::/96): the IPv4 address it carries.
        ("64:ff9b::a00:1", Some(Refused::Private)),
        ("64:ff9b::808:808", None),
        // The rest of 2001::/23 and what is outside 2000::/3.
        ("2001:2::1", Some(Refused::Reserved)),
        ("2001:1ff:ffff::1", Some(Refused::Reserved)),
        ("::ffff:0:a00:1", Some(Refused::Reserved)),
        ("100::1", Some(Refused::Reserved)),
        ("64:ff9b:2::1", Some(Refused::Reserved)),
        ("4000::1", Some(Refused::Reserved)),
        ("192.88.99.1", Some(Refused::Reserved)),
        // Global unicast next to them is admitted.
        ("2001:200::1", None),
        ("2001:4860:4860::8888", None),
        ("2003::1", None),
        ("2a00:1450:4001::1", None),
    ];
    for (ip, want) in cases {
        assert_eq!(refused(ip), want, "{ip}");
    }
}

#[test]
fn the_operator_allows_ranges_explicitly_and_nothing_else() {
    let policy = EgressPolicy {
        allow: vec!["127.0.0.1/32".parse().unwrap(), "fd00::/8".parse().unwrap()],
        schemes: Schemes::HttpsOnly,
        ports: Vec::new(),
    };
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(policy.admits(ip("127.0.0.1")), Ok(()));
    assert_eq!(policy.admits(ip("::ffff:127.0.0.1")), Ok(()));
    assert_eq!(policy.admits(ip("127.0.0.2")), Err(Refused::Loopback));
    assert_eq!(policy.admits(ip("fd12::1")), Ok(()));
    assert_eq!(policy.admits(ip("fc00::1")), Err(Refused::Private));
    assert_eq!(
        EgressPolicy::default().admits(ip("169.254.169.254")),
        Err(Refused::LinkLocal)
    );
    assert_eq!(EgressPolicy::default().admits(ip("8.8.8.8")), Ok(()));
    assert!("10.0.0.0/33".parse::<Cidr>().is_err());
    assert!("ten/8".parse::<Cidr>().is_err());
    assert_eq!(
        "10.0.0.0/8".parse::<Cidr>().unwrap().to_string(),
        "10.0.0.0/8"
    );
}

#[test]
fn urls_are_checked_for_form_scheme_and_literal_addresses() {
    let url = |s: &str| EndpointUrl::parse("webhook_url", s);
    assert!(url("https://hooks.example.com/toki?x=1").is_ok());
    for bad in [
        "ftp://example.com/",
        "https://user:pw@example.com/",
        "https://example.com/#frag",
        "not a url",
        "file:///etc/passwd",
    ] {
        let e = url(bad).unwrap_err();
        assert_eq!(e.field, "webhook_url", "{bad}");
    }
    let long = format!("https://example.com/{}", "a".repeat(MAX_URL_CHARS));
    assert!(url(&long).is_err());
    // The bound is on the value as sent: padding is not trimmed away first.
    let padded = format!("{}https://example.com/", " ".repeat(MAX_URL_CHARS));
    assert_eq!(url(&padded).unwrap_err().field, "webhook_url");
    let optional = |s: &str| EndpointUrl::parse_optional("default_url", Some(s));
    assert_eq!(optional(" \t").unwrap(), None, "blank is none");
    assert_eq!(
        EndpointUrl::parse_optional("default_url", None).unwrap(),
        None
    );
    let blank_but_long = "\u{c}".repeat(MAX_URL_CHARS + 1);
    assert_eq!(
        optional(&blank_but_long).unwrap_err().field,
        "default_url",
        "a blank value over the bound is refused, as the schema says"
    );
    assert!(optional(" https://example.com/ ").unwrap().is_some());

    let strict = EgressPolicy::default();
    let check = |p: &EgressPolicy, s: &str| p.check("webhook_url", &url(s).unwrap());
    assert!(check(&strict, "https://hooks.example.com/").is_ok());
    let e = check(&strict, "http://hooks.example.com/").unwrap_err();
    assert!(e.problem.contains("https"), "{e}");
    for private in [
        "https://10.0.0.5/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:127.0.0.1]/",
        "https://[fe80::1]/",
        "https://127.1/",
    ] {
        let e = check(&strict, private).unwrap_err();
        assert!(e.problem.contains("SSRF"), "{private}: {e}");
    }
    let tests = EgressPolicy {
        allow: vec!["127.0.0.1/32".parse().unwrap()],
        schemes: Schemes::HttpAllowed,
        ports: vec![PortRange::ALL],
    };
    assert!(check(&tests, "http://127.0.0.1:8080/hook").is_ok());
    assert!(check(&tests, "http://10.0.0.1/hook").is_err());
    assert_eq!(
        url("https://Hooks.Example.com/x").unwrap().host(),
        "hooks.example.com"
    );
}

/// Port 443 and the operator's ports, nothing else: a tenant cannot aim a
/// request at another service of a host. A URL without a port goes to its
/// scheme's (80 for http: refused unless allowed).
#[test]
fn endpoints_use_port_443_and_the_ports_the_operator_allows() {
    let url = |s: &str| EndpointUrl::parse("url", s).unwrap();
    let strict = EgressPolicy::default();
    for ok in [
        "https://hooks.example.com/",
        "https://hooks.example.com:443/x",
    ] {
        assert!(strict.check("url", &url(ok)).is_ok(), "{ok}");
    }
    for refused in [
        "https://hooks.example.com:8443/",
        "https://hooks.example.com:25/",
        "https://hooks.example.com:6379/",
        "https://93.184.216.34:22/",
        "https://[2606:4700:4700::1111]:80/",
    ] {
        let e = strict.check("url", &url(refused)).unwrap_err();
        assert_eq!(e.field, "url", "{refused}");
        assert!(e.problem.contains("port"), "{refused}: {e}");
    }
    let http = EgressPolicy {
        schemes: Schemes::HttpAllowed,
        ..EgressPolicy::default()
    };
    let e = http
        .check("url", &url("http://hooks.example.com/"))
        .unwrap_err();
    assert!(e.problem.contains("port 80"), "{e}");
    let operator = EgressPolicy {
        schemes: Schemes::HttpAllowed,
        ports: vec!["80".parse().unwrap(), "8000-8999".parse().unwrap()],
        ..EgressPolicy::default()
    };
    for ok in [
        "http://hooks.example.com/",
        "https://hooks.example.com:8000/",
        "https://hooks.example.com:8999/",
        "https://hooks.example.com/",
    ] {
        assert!(operator.check("url", &url(ok)).is_ok(), "{ok}");
    }
    for refused in [
        "https://hooks.example.com:9000/",
        "https://hooks.example.com:7999/",
    ] {
        assert!(operator.check("url", &url(refused)).is_err(), "{refused}");
    }
}

#[test]
fn port_ranges_parse_and_say_what_is_wrong() {
    let range = |s: &str| s.parse::<PortRange>();
    assert_eq!(range("8443").unwrap().to_string(), "8443");
    assert_eq!(range(" 8000 - 8999 ").unwrap().to_string(), "8000-8999");
    assert!(range("8000-8999").unwrap().contains(8500));
    assert!(!range("8000-8999").unwrap().contains(9000));
    for bad in ["0", "65536", "http", "9000-8000", "-1", "1-", ""] {
        assert!(range(bad).is_err(), "{bad}");
    }
    let policy: EgressPolicy = serde_json::from_str(r#"{"ports": [8443, "9000-9100"]}"#).unwrap();
    assert!(policy.admits_port(8443) && policy.admits_port(9050) && policy.admits_port(443));
    assert!(!policy.admits_port(8080));
}
