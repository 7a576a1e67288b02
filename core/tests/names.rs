//! Names: a blank name (empty or whitespace) and one holding a control character are refused
//! wherever a name is taken, as a typed error naming the `name` field and its bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use stormguard_core::{
    limits::BulkheadSettings, limits::RateLimitSettings, limits::WindowLimitSettings,
    name::NameError, policy::AddPolicyError, policy::PolicyEngine, Bound, BreakerSettings,
    BudgetSettings, Field, Name, SettingsError,
};

const BAD: [(&str, Bound); 4] = [
    ("", Bound::NotBlank),
    ("   ", Bound::NotBlank),
    ("db\nup 1", Bound::NoControlCharacters),
    ("db\u{7f}", Bound::NoControlCharacters),
];

fn err(bound: Bound) -> SettingsError {
    SettingsError {
        field: Field::Name,
        bound,
    }
}

#[test]
fn a_blank_or_control_character_name_is_refused_by_every_settings_builder() {
    for (name, bound) in BAD {
        let named = Name::new(name);
        let want = Err(err(bound));
        assert_eq!(BreakerSettings::builder(name).build().map(|_| ()), want);
        assert_eq!(
            BreakerSettings::builder_named(named).build().map(|_| ()),
            want
        );
        assert_eq!(BreakerSettings::consecutive_only(name, 3).map(|_| ()), want);
        assert_eq!(BudgetSettings::builder(name).build().map(|_| ()), want);
        assert_eq!(BulkheadSettings::builder(name).build().map(|_| ()), want);
        assert_eq!(RateLimitSettings::per_second(name, 5).map(|_| ()), want);
        assert_eq!(WindowLimitSettings::builder(name).build().map(|_| ()), want);
    }
}

#[test]
fn a_name_from_a_configuration_file_is_checked_when_it_is_read() {
    assert_eq!(Name::try_from_str(" \t"), Err(NameError::ControlCharacter));
    assert_eq!(Name::try_from_str(" "), Err(NameError::Blank));
    assert_eq!(Name::try_from_str("a\nb"), Err(NameError::ControlCharacter));
    assert_eq!(
        SettingsError::name(NameError::TooLong),
        err(Bound::AtMost(32))
    );
}

#[test]
fn the_const_path_still_builds_valid_names_and_can_check_literals() {
    const S: BreakerSettings = BreakerSettings::defaults("x");
    const CHECKED: Result<BreakerSettings, SettingsError> = BreakerSettings::builder("\n").build();
    const NAME: Result<Name, NameError> = Name::try_new("a\"quote\\and-slash");
    assert_eq!(S.name(), &"x");
    assert_eq!(CHECKED.map(|_| ()), Err(err(Bound::NoControlCharacters)));
    assert!(NAME.is_ok());
}

#[test]
fn the_policy_engine_refuses_a_rule_with_a_blank_or_control_character_name() {
    let mut engine: PolicyEngine<(), u8, (), 4> = PolicyEngine::new();
    for (name, _) in BAD {
        let e = engine.add(name, |_| Ok(true), 1).unwrap_err();
        assert!(
            matches!(e, AddPolicyError::InvalidName(_, _)),
            "{name:?}: {e:?}"
        );
        assert_eq!(*e.into_policy().config(), 1);
    }
    assert!(engine.is_empty());
    engine.add("fine", |_| Ok(true), 2).unwrap();
    assert_eq!(engine.len(), 1);
}

#[test]
fn the_infallible_shortcuts_never_carry_a_refused_name() {
    assert_eq!(BreakerSettings::defaults("").name(), &"unnamed");
    assert_eq!(
        BreakerSettings::escalating_cooldown("a\nb").name(),
        &"unnamed"
    );
    assert_eq!(BudgetSettings::defaults(" ").name(), &"unnamed");
    assert_eq!(BudgetSettings::defaults("db").name(), &"db");
}
