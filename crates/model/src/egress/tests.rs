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

#[test]
fn the_operator_allows_ranges_explicitly_and_nothing_else() {
    let policy = EgressPolicy {
        allow: vec!["127.0.0.1/32".parse().unwrap(), "fd00::/8".parse().unwrap()],
        schemes: Schemes::HttpsOnly,
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
    };
    assert!(check(&tests, "http://127.0.0.1:8080/hook").is_ok());
    assert!(check(&tests, "http://10.0.0.1/hook").is_err());
    assert_eq!(
        url("https://Hooks.Example.com/x").unwrap().host(),
        "hooks.example.com"
    );
}
