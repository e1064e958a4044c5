use super::*;
use chrono::Duration;

use super::render::candidates;
use crate::domain::{Channel, DueAt, Instant, Occurrence, ScheduleId, User, UserId};
use crate::ScheduleSnapshot;

fn user(locale: &str, zone: chrono_tz::Tz) -> User {
    User {
        id: "u1".parse::<UserId>().unwrap(),
        name: "Ana".into(),
        email: Some("ana@example.com".into()),
        slack_user_id: Some("U1".into()),
        time_zone: zone,
        locale: locale.into(),
        channels_off: Default::default(),
        webhook_url: None,
    }
}

fn schedule(title: &str, body: &str) -> ScheduleSnapshot {
    ScheduleSnapshot {
        id: "s1".parse::<ScheduleId>().unwrap(),
        title: title.into(),
        body: body.into(),
        version: 1,
        participants: vec![],
        exceptions: vec![],
    }
}

fn at(s: &str) -> Instant {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

/// The reminder of a meeting at 2030-01-21 00:00 UTC, `minutes` before.
fn render(t: &Templates, channel: Channel, s: &ScheduleSnapshot, u: &User, minutes: i64) -> Texts {
    let start = at("2030-01-21T00:00:00Z");
    t.reminder(
        channel,
        s,
        Occurrence(start),
        DueAt(start - Duration::minutes(minutes)),
        u,
    )
    .unwrap()
}

fn tenant(channel: Channel, locale: &str, text: &str) -> ReminderTemplate {
    ReminderTemplate {
        channel,
        locale: locale.into(),
        subject: None,
        text: text.into(),
        html: None,
    }
}

#[test]
fn defaults_say_when_in_the_recipients_zone_and_language() {
    let t = Templates::defaults();
    let s = schedule("Review", "Room 3");
    let en = render(
        &t,
        Channel::Chat,
        &s,
        &user("en", chrono_tz::Europe::Berlin),
        10,
    );
    assert_eq!(en.subject, "", "only mail has a subject");
    let mail = render(
        &t,
        Channel::Mail,
        &s,
        &user("en", chrono_tz::Europe::Berlin),
        10,
    );
    assert_eq!(mail.subject, "Reminder: Review");
    assert_eq!(mail.text, en.text, "the plain part is chat's text");
    assert_eq!(
        en.text,
        "Hi Ana, \"Review\" starts in 10 minutes (2030-01-21 01:00 Europe/Berlin).\nRoom 3"
    );
    assert_eq!(en.html, None, "chat has no HTML part");
    let one = render(&t, Channel::Chat, &s, &user("en-US", chrono_tz::UTC), 1);
    assert!(one.text.contains("starts in 1 minute ("), "{}", one.text);
    let now = render(&t, Channel::Chat, &s, &user("en", chrono_tz::UTC), 0);
    assert!(now.text.contains("is starting now"), "{}", now.text);
    let ja = render(
        &t,
        Channel::Mail,
        &s,
        &user("ja-JP", chrono_tz::Asia::Tokyo),
        10,
    );
    assert_eq!(ja.subject, "[リマインダー] Review");
    assert_eq!(
        ja.text,
        "Anaさん、「Review」が10分後に開始します（2030-01-21 09:00 Asia/Tokyo）。\nRoom 3"
    );
    // A language without built-in texts reads English.
    let fr = render(
        &t,
        Channel::Chat,
        &s,
        &user("fr", chrono_tz::Europe::Paris),
        10,
    );
    assert!(fr.text.starts_with("Hi Ana"), "{}", fr.text);
}

#[test]
fn values_are_escaped_for_the_channel_and_the_authors_markup_is_kept() {
    let s = schedule("<!here> Q&A <b>", "1 < 2\nsecond line");
    let u = user("en", chrono_tz::UTC);
    let t = Templates::defaults();
    let slack = render(&t, Channel::Slack, &s, &u, 5);
    assert!(
        slack.text.contains("\"&lt;!here&gt; Q&amp;A &lt;b&gt;\""),
        "{}",
        slack.text
    );
    assert!(
        !slack.text.contains("<!here>"),
        "a title cannot mention @here"
    );
    let chat = render(&t, Channel::Chat, &s, &u, 5);
    assert!(
        chat.text.contains("\"<!here> Q&A <b>\""),
        "chat is plain: {}",
        chat.text
    );
    let mail = render(&t, Channel::Mail, &s, &u, 5);
    assert!(
        mail.text.contains("<!here> Q&A <b>"),
        "the plain part is plain"
    );
    let html = mail.html.unwrap();
    assert!(
        html.contains("<strong>&lt;!here&gt; Q&amp;A &lt;b&gt;</strong>"),
        "{html}"
    );
    assert!(html.contains("1 &lt; 2\nsecond line"), "{html}");
    assert_eq!(
        mail.subject, "Reminder: <!here> Q&A <b>",
        "a subject is plain"
    );

    // The tenant's own Slack markup stays; only the values are escaped,
    // and no text mentions a whole channel (a template stored before that
    // was refused, or one that builds the mention from its data).
    let own = Templates::compile(&[tenant(
        Channel::Slack,
        "en",
        "<!here> *{{ title }}* at {{ time }} <{{ '!channel' }}> {{ title|safe }}",
    )]);
    let slack = render(&own, Channel::Slack, &s, &u, 5);
    assert_eq!(
        slack.text,
        "&lt;!here> *&lt;!here&gt; Q&amp;A &lt;b&gt;* at 00:00 &lt;!channel> &lt;!here> Q&A <b>"
    );
}

#[test]
fn a_tenant_template_is_picked_by_locale_then_language_then_english() {
    let own = Templates::compile(&[
        tenant(Channel::Chat, "en-gb", "GB {{ title }}"),
        tenant(Channel::Chat, "ja", "JA {{ title }}"),
        tenant(Channel::Mail, "en", "EN {{ title }} at {{ starts_at }}"),
    ]);
    let s = schedule("Review", "");
    let text =
        |channel, locale: &str| render(&own, channel, &s, &user(locale, chrono_tz::UTC), 5).text;
    assert_eq!(text(Channel::Chat, "en-GB"), "GB Review");
    assert_eq!(text(Channel::Chat, "ja-JP"), "JA Review");
    assert!(
        text(Channel::Chat, "en-US").starts_with("Hi Ana"),
        "the default en"
    );
    assert!(
        text(Channel::Slack, "ja").starts_with("Anaさん"),
        "other channels: defaults"
    );
    // No French: the tenant's English before the default English.
    assert_eq!(text(Channel::Mail, "fr"), "EN Review at 2030-01-21 00:00");
    // The tenant wrote the text but no HTML: the HTML part says the same.
    let mail = render(
        &own,
        Channel::Mail,
        &schedule("A & B", ""),
        &user("en", chrono_tz::UTC),
        5,
    );
    assert_eq!(
        mail.html.unwrap(),
        "<p>EN A &amp; B at 2030-01-21 00:00</p>\n"
    );
    assert_eq!(
        mail.subject, "Reminder: A & B",
        "no subject of its own: the default"
    );
}

#[test]
fn a_subject_is_one_line() {
    let own = Templates::compile(&[ReminderTemplate {
        subject: Some("{{ title }}\n\n(in {{ minutes }} min)".into()),
        ..tenant(Channel::Mail, "en", "{{ title }}")
    }]);
    let mail = render(
        &own,
        Channel::Mail,
        &schedule("Review\r\nBcc: x@y", ""),
        &user("en", chrono_tz::UTC),
        5,
    );
    assert_eq!(mail.subject, "Review Bcc: x@y (in 5 min)");
}

#[test]
fn a_template_that_fails_at_send_time_falls_back_to_the_default() {
    // Compiles, renders for the samples, fails on this recipient's data.
    let own = Templates::compile(&[tenant(
        Channel::Chat,
        "en",
        "{{ title }} {{ 10 // (minutes - 5) }}",
    )]);
    let out = render(
        &own,
        Channel::Chat,
        &schedule("Review", ""),
        &user("en", chrono_tz::UTC),
        5,
    );
    assert!(out.text.starts_with("Hi Ana, \"Review\""), "{}", out.text);
}

#[test]
fn registration_refuses_a_template_that_does_not_render_naming_the_part() {
    let input = |subject: Option<&str>, text: &str, html: Option<&str>| TemplateInput {
        subject: subject.map(Into::into),
        text: text.into(),
        html: html.map(Into::into),
    };
    let err = |channel, locale: &str, i: TemplateInput| {
        ReminderTemplate::validate(channel, locale, &i).unwrap_err()
    };
    let e = err(Channel::Chat, "en", input(None, "Hi {{ nmae }}", None));
    assert_eq!(e.field, "text");
    assert!(e.problem.contains("undefined"), "{}", e.problem);
    let e = err(Channel::Mail, "en", input(Some("{% if %}"), "x", None));
    assert_eq!(e.field, "subject");
    assert!(e.problem.contains("syntax"), "{}", e.problem);
    let e = err(
        Channel::Mail,
        "en",
        input(None, "x", Some("<p>{{ title }\n</p>")),
    );
    assert_eq!(e.field, "html");
    assert!(e.problem.contains("line"), "{}", e.problem);
    let e = err(Channel::Slack, "en", input(None, "x", Some("<p>x</p>")));
    assert_eq!(
        (e.field.as_str(), e.problem.contains("only mail")),
        ("html", true)
    );
    let e = err(Channel::Chat, "en", input(Some("x"), "x", None));
    assert_eq!(e.field, "subject");
    let e = err(
        Channel::Chat,
        "en",
        input(None, "{% if minutes > 5 %}{{ title }}{% endif %}", None),
    );
    assert_eq!(e.field, "text");
    assert!(e.problem.contains("renders empty"), "{}", e.problem);
    let e = err(Channel::Chat, "english!", input(None, "x", None));
    assert_eq!(e.field, "locale");
    let e = err(Channel::Chat, "en", input(None, &"x".repeat(8_001), None));
    assert_eq!(e.field, "text");
    // A good one, its locale normalised, and what it makes of a sample.
    let t = ReminderTemplate::validate(
        Channel::Mail,
        "EN_gb",
        &input(
            Some("[{{ minutes }}] {{ title }}"),
            "{{ name }}: {{ title }} at {{ time }}",
            None,
        ),
    )
    .unwrap();
    assert_eq!(t.locale, "en-gb");
    let ex = t.example().unwrap();
    assert_eq!(ex.subject, "[10] Weekly review");
    assert_eq!(ex.text, "Ana: Weekly review at 10:00");
    assert_eq!(
        ex.html.as_deref(),
        Some("<p>Ana: Weekly review at 10:00</p>\n")
    );
}

#[test]
fn mrkdwn_and_html_helpers() {
    assert_eq!(escape_mrkdwn("a & <b> c"), "a &amp; &lt;b&gt; c");
    assert_eq!(text_to_html("a\n<b>\n"), "<p>a<br>\n&lt;b&gt;</p>\n");
    assert_eq!(candidates("EN-gb"), vec!["en-gb", "en"]);
    assert_eq!(candidates("ja"), vec!["ja", "en"]);
}

/// The template of issue 33: ten billion steps, 100 GB of output.
const BOMB: &str =
    "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}";

/// A hundred million steps, no output.
const SPIN: &str =
    "{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}x";

fn refused(channel: Channel, text: &str) -> crate::ValidationError {
    let input = TemplateInput {
        subject: None,
        text: text.into(),
        html: None,
    };
    ReminderTemplate::validate(channel, "en", &input).unwrap_err()
}

#[test]
fn registration_refuses_a_template_that_runs_out_of_fuel() {
    // The bomb's ranges are too long to make at all.
    let e = refused(Channel::Chat, BOMB);
    assert_eq!(e.field, "text");
    assert!(
        e.problem.contains("range has more than 10000 numbers"),
        "{e}"
    );
    // Within the range limit it writes 10 bytes in 3 steps: the output
    // limit stops it first.
    let e = refused(Channel::Chat, &BOMB.replace("100000", "10000"));
    assert_eq!(e.field, "text");
    assert!(e.problem.contains("(output limit)"), "{e}");
    let e = refused(Channel::Chat, SPIN);
    assert_eq!(e.field, "text");
    assert_eq!(
        e.problem,
        format!("uses more than the {FUEL} steps of work a template may take (fuel)")
    );
    // Cheap for the samples, too much work for the longest body.
    let e = refused(
        Channel::Chat,
        "{% for c in body %}{% if c == 'x' %}{{ c }}{% endif %}{% endfor %}{{ title }}",
    );
    assert_eq!(
        (e.field.as_str(), e.problem.as_str()),
        (
            "text",
            format!("uses more than the {FUEL} steps of work a template may take (fuel) with the largest inputs").as_str()
        )
    );
}

#[test]
fn registration_refuses_a_template_whose_output_is_too_long() {
    // 2,000 copies of the body: little work, 80 MB for the longest body.
    let e = refused(
        Channel::Slack,
        "{% for i in range(2000) %}{{ body }}{% endfor %}{{ title }}",
    );
    assert_eq!(e.field, "text");
    assert_eq!(
        e.problem,
        format!("renders more than the {MAX_CHAT_OUTPUT} bytes a Slack text may have (output limit) with the largest inputs")
    );
    let input = TemplateInput {
        subject: Some("{{ title }}{{ title }}{{ title }}".into()),
        text: "{{ title }}".into(),
        html: None,
    };
    let e = ReminderTemplate::validate(Channel::Mail, "en", &input).unwrap_err();
    assert_eq!(e.field, "subject");
    assert!(
        e.problem
            .contains(&format!("the {MAX_SUBJECT_OUTPUT} bytes a mail subject")),
        "{e}"
    );
}

#[test]
fn registration_refuses_a_template_that_nests_too_deep() {
    let deep = format!(
        "{}{{{{ title }}}}{}",
        "{% for a in 'x' %}".repeat(120),
        "{% endfor %}".repeat(120)
    );
    let e = refused(Channel::Chat, &deep);
    assert_eq!(e.field, "text");
    assert_eq!(
        e.problem,
        format!("nests deeper than the {RECURSION_LIMIT} levels a template may (recursion limit)")
    );
    // Deeper still, the parser refuses it before it runs.
    let deeper = deep.replace("{% for a in 'x' %}", "{% for a in 'x' %}{% if a %}");
    let deeper = deeper.replace("{% endfor %}", "{% endif %}{% endfor %}");
    let e = refused(Channel::Chat, &deeper);
    assert!(e.problem.contains("recursion limit"), "{e}");
}

#[test]
fn the_defaults_fit_the_limits_with_the_largest_inputs() {
    for channel in Channel::ALL {
        for locale in DEFAULT_LOCALES {
            let d = default_template(channel, locale).unwrap();
            let input = TemplateInput {
                subject: d.subject,
                text: d.text,
                html: d.html,
            };
            ReminderTemplate::validate(channel, locale, &input)
                .unwrap_or_else(|e| panic!("{channel} {locale}: {e}"));
        }
    }
}

#[test]
fn a_stored_template_over_a_limit_fails_at_send_time_naming_it() {
    // Stored without the check (a hand edit): no default text in its place.
    let own = Templates::compile(&[tenant(Channel::Chat, "en", SPIN)]);
    let start = at("2030-01-21T00:00:00Z");
    let out = own.reminder(
        Channel::Chat,
        &schedule("Review", ""),
        Occurrence(start),
        DueAt(start),
        &user("en", chrono_tz::UTC),
    );
    assert_eq!(out, Err(RenderError::OutOfFuel));
    // Other channels still get the default.
    let slack = own.reminder(
        Channel::Slack,
        &schedule("Review", ""),
        Occurrence(start),
        DueAt(start),
        &user("en", chrono_tz::UTC),
    );
    assert!(slack.is_ok());
}

/// What would build values larger than given is refused by name: the
/// operators that join or repeat, the functions and filters left out; the
/// filters kept stay within the value limit.
#[test]
fn the_language_builds_no_large_values() {
    for (text, names) in [
        ("{% set a = title ~ title %}{{ a }}", "`~`"),
        ("{{ title * 3 }}", "`*`"),
        ("{{ 1 + 2 }}{{ title }}", "`+`"),
        // Towers of shared copies, written out at any size.
        ("{% set a = [title, title] %}{{ a }}", "a list literal"),
        ("{% set a = (title, title) %}{{ a }}", "a tuple"),
        ("{% set a = {'t': title} %}{{ a }}", "a map literal"),
        // Output collected outside the output cap.
        (
            "{% set x %}{{ body }}{% endset %}{{ title }}",
            "{% set %} ... {% endset %}",
        ),
        (
            "{% filter upper %}{{ title }}{% endfilter %}",
            "{% filter %}",
        ),
        (
            "{% macro m() %}{{ body }}{% endmacro %}{{ m() }}",
            "{% macro %}",
        ),
        ("{% include 'chat/en.text' %}{{ title }}", "{% include %}"),
        ("{{ 2 ** 3 }}{{ title }}", "`**`"),
    ] {
        let e = refused(Channel::Chat, text);
        assert_eq!(e.field, "text", "{text}");
        assert!(e.problem.contains(names), "{text}: {e}");
    }
    for filter in [
        "join",
        "replace('a', 'aaaa')",
        "format(title)",
        "indent(100000)",
        "list",
        "tojson",
    ] {
        let text = format!("{{{{ title|{filter} }}}}");
        let e = refused(Channel::Chat, &text);
        assert!(e.problem.contains("unknown filter"), "{text}: {e}");
    }
    for function in ["lipsum(100000)", "namespace()", "dict(a=1)"] {
        let text = format!("{{{{ {function} }}}}{{{{ title }}}}");
        let e = refused(Channel::Chat, &text);
        assert!(e.problem.contains("unknown function"), "{text}: {e}");
    }
    for filter in super::FILTERS {
        let numeric = ["abs", "round", "int", "float"].contains(filter);
        let value = if numeric { "minutes" } else { "title" };
        let text = format!("{{{{ {value}|{filter} }}}}");
        ReminderTemplate::validate(
            Channel::Chat,
            "en",
            &TemplateInput {
                subject: None,
                text,
                html: None,
            },
        )
        .unwrap_or_else(|e| panic!("{filter}: {e}"));
    }
}

/// Work inside one instruction is charged per item: a range walked by `in`,
/// `|last`, `|first` in a loop, a comparison or its text, each a few steps
/// of fuel, is refused at registration by the work limit (the first was
/// accepted after 27 s of CPU with `range(100000)`); a range's length, known
/// without walking it, costs nothing.
#[test]
fn registration_refuses_templates_that_walk_ranges_by_the_work_limit() {
    let work_limit =
        format!("walks or reads more than the {WORK} units of work a template may (work limit)");
    for walk in [
        "{% if 9999 in range(10000) %}{% endif %}",
        "{% if range(10000)|last %}{% endif %}",
        "{% if range(10000) == range(10000) %}{% endif %}",
        "{% if range(10000)|string %}{% endif %}",
        "{% if range(10000)[5000:]|first %}{% endif %}",
    ] {
        let text = format!("{{% for i in range(1500) %}}{walk}{{% endfor %}}Hi {{{{ name }}}}");
        let e = refused(Channel::Chat, &text);
        assert_eq!(
            (e.field.as_str(), e.problem.as_str()),
            ("text", work_limit.as_str()),
            "{walk}"
        );
    }
    let e = refused(
        Channel::Chat,
        "{% if 99999 in range(100000) %}{% endif %}Hi",
    );
    assert!(
        e.problem
            .contains(&format!("range has more than {MAX_RANGE} numbers")),
        "{e}"
    );
    let cheap = "{% for i in range(1500) %}{% if range(10000)|length > 5 %}{% endif %}{% endfor %}Hi {{ name }}";
    let input = TemplateInput {
        subject: None,
        text: cheap.into(),
        html: None,
    };
    ReminderTemplate::validate(Channel::Chat, "en", &input).expect("a length is not a walk");
}

/// Work the meter cannot see item by item (a string searched in a loop) is
/// still measured: its CPU time with the largest inputs is over the budget.
#[test]
fn registration_refuses_a_template_over_its_cpu_time() {
    let text = "{% set b = body|e %}{% for c in body[:5000] %}{% if 'zq' in b %}{% endif %}{% endfor %}{{ title }}";
    let e = refused(Channel::Chat, text);
    assert_eq!(e.field, "text");
    assert_eq!(
        e.problem,
        format!(
            "takes more than the {} ms of CPU a template may (time limit) with the largest inputs",
            REGISTRATION_CPU.as_millis()
        )
    );
}

/// At delivery a render past its budget is an error naming the limit.
#[test]
fn at_delivery_a_render_past_its_cpu_budget_fails_naming_it() {
    let no_time = RenderBudget {
        cpu: std::time::Duration::ZERO,
        ..RenderBudget::DELIVERY
    };
    let text = "{% for i in range(100) %}{{ i }}{% endfor %}{{ title }}";
    let own = Templates::compile(&[tenant(Channel::Chat, "en", text)]).with_budget(no_time);
    let start = at("2030-01-21T00:00:00Z");
    let out = own.reminder(
        Channel::Chat,
        &schedule("Review", ""),
        Occurrence(start),
        DueAt(start),
        &user("en", chrono_tz::UTC),
    );
    let e = out.unwrap_err();
    assert_eq!(
        e,
        RenderError::OverBudget(Overrun::Time(std::time::Duration::ZERO))
    );
    assert_eq!(
        e.to_string(),
        "takes more than the 0 ms of CPU a template may (time limit)"
    );
}

/// A part that went past its budget once is not rendered again while the
/// compiled templates are kept: a template costly for one recipient's data
/// costs one over-budget render, not one per recipient. Another part, and
/// the same template compiled afresh, render.
#[test]
fn a_part_over_its_budget_is_not_rendered_again() {
    let text = "{% if name == 'Heavy' %}{% for i in range(1500) %}\
                {% if 9999 in range(10000) %}{% endif %}{% endfor %}{% endif %}Hi {{ name }}";
    let compile = || Templates::compile(&[tenant(Channel::Chat, "en", text)]);
    let start = at("2030-01-21T00:00:00Z");
    let remind = |t: &Templates, name: &str| {
        let u = User {
            name: name.into(),
            ..user("en", chrono_tz::UTC)
        };
        t.reminder(
            Channel::Chat,
            &schedule("Review", ""),
            Occurrence(start),
            DueAt(start),
            &u,
        )
    };
    let own = compile();
    let over = Err(RenderError::OverBudget(Overrun::Work(WORK)));
    assert_eq!(remind(&own, "Heavy"), over);
    assert_eq!(remind(&own, "Ana"), over, "tripped: not rendered for Ana");
    assert!(own
        .reminder(
            Channel::Mail,
            &schedule("Review", ""),
            Occurrence(start),
            DueAt(start),
            &user("en", chrono_tz::UTC)
        )
        .is_ok());
    assert_eq!(remind(&compile(), "Ana").unwrap().text, "Hi Ana");
}

/// A Slack template that mentions a whole channel is refused, however the
/// mention is made.
#[test]
fn registration_refuses_a_slack_text_that_mentions_a_whole_channel() {
    for text in [
        "<!here> {{ title }}",
        "<!channel> {{ title }}",
        "<!everyone> {{ title }}",
        "<!subteam^S0123|team> {{ title }}",
        "<{{ '!here' }}> {{ title }}",
    ] {
        let e = refused(Channel::Slack, text);
        assert_eq!(e.field, "text", "{text}");
        assert!(
            e.problem.contains("mentions a whole channel"),
            "{text}: {e}"
        );
    }
    // Chat and mail are plain text: `<!here>` is just characters there.
    let input = TemplateInput {
        subject: None,
        text: "<!here> {{ title }}".into(),
        html: None,
    };
    ReminderTemplate::validate(Channel::Chat, "en", &input).unwrap();
}
