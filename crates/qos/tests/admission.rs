//! Admission control: who gets in, who is refused and why, and what BE tenants get.

use qos::{
    BeSpec, DeclaredMix, DeviceProfile, LcSlo, LoadMix, RefusalCode, Registry, RegistryConfig,
    RegistryError, Scheduler, SchedulerConfig, TenantSpec,
};

/// A registry without the LC surge: the published arithmetic (the surge has its own tests
/// below, on the default configuration).
fn registry() -> Registry {
    Registry::new(
        DeviceProfile::reflex_a(),
        RegistryConfig {
            lc_surge_pct: 0,
            ..RegistryConfig::default()
        },
    )
}

fn lc(p95_us: u64, iops: u64, read_pct: u8) -> TenantSpec {
    TenantSpec::LatencyCritical(LcSlo {
        p95_read_latency_ns: p95_us * 1000,
        iops,
        read_pct,
        request_bytes: 4096,
    })
}

fn be(mix: DeclaredMix) -> TenantSpec {
    TenantSpec::BestEffort(BeSpec { mix })
}

#[test]
fn published_scenario_one_allocation() {
    let mut r = registry();
    let a = r.register(lc(500, 120_000, 100)).expect("A fits");
    let b = r.register(lc(500, 70_000, 80)).expect("B fits");
    r.register(be(DeclaredMix::Mixed)).expect("C");
    r.register(be(DeclaredMix::Mixed)).expect("D");
    assert_eq!(a.reservation_mtok_per_sec(), 120_000_000);
    assert_eq!(b.reservation_mtok_per_sec(), 196_000_000);
    let cap = r.capacity();
    assert_eq!(cap.mix, LoadMix::Mixed);
    assert_eq!(cap.strictest_p95_ns, Some(500_000));
    assert_eq!(cap.device_rate_mtok_per_sec, 420_000_000);
    assert_eq!(cap.lc_reserved_mtok_per_sec, 316_000_000);
    assert_eq!(cap.be_share_mtok_per_sec, 52_000_000);
    assert_eq!(r.shared().be_share_mtok_per_sec(), 52_000_000);
}

#[test]
fn reservations_beyond_capacity_are_refused_with_the_numbers() {
    let mut r = registry();
    r.register(lc(500, 120_000, 100)).expect("A");
    r.register(lc(500, 70_000, 80)).expect("B");
    let refusal = r.register(lc(500, 120_000, 100)).unwrap_err();
    assert_eq!(refusal.code(), RefusalCode::ReservationsExceedCapacity);
    assert_eq!(refusal.code().as_u16(), 3);
    let text = refusal.to_string();
    for needle in [
        "120000 tokens/s",
        "316000",
        "420000",
        "104000 remain",
        "500000 ns",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from {text:?}");
    }
    // Nothing changed.
    assert_eq!(r.capacity().lc_tenants, 2);
    // A smaller one still fits exactly.
    r.register(lc(500, 104_000, 100))
        .expect("exactly the rest fits");
    assert_eq!(r.capacity().lc_reserved_mtok_per_sec, 420_000_000);
}

#[test]
fn slo_tighter_than_the_table_is_refused() {
    let mut r = registry();
    let refusal = r.register(lc(300, 1_000, 100)).unwrap_err();
    assert_eq!(refusal.code(), RefusalCode::SloTighterThanTable);
    let text = refusal.to_string();
    assert!(
        text.contains("300000 ns") && text.contains("500000 ns"),
        "{text}"
    );
    assert_eq!(r.tenants().count(), 0);
}

#[test]
fn the_strictest_slo_sets_everyones_capacity() {
    let mut r = registry();
    // At 2 ms the device sustains 570 K tokens/s.
    let big = r
        .register(lc(2000, 250_000, 90))
        .expect("250 K × 1.9 = 475 K ≤ 570 K");
    assert_eq!(big.reservation_mtok_per_sec(), 475_000_000);
    assert_eq!(r.capacity().device_rate_mtok_per_sec, 570_000_000);
    // A newcomer at 1 ms lowers the rate to 470 K for everyone: even one read/s does not fit.
    let refusal = r.register(lc(1000, 1, 100)).unwrap_err();
    assert_eq!(refusal.code(), RefusalCode::ReservationsExceedCapacity);
    assert!(refusal.to_string().contains("470000"), "{refusal}");
    // At 1.5 ms the rate is 520 K: a 45 K tokens/s tenant fits.
    r.register(lc(1500, 45_000, 100)).expect("fits at 520 K");
    assert_eq!(r.capacity().device_rate_mtok_per_sec, 520_000_000);
    assert_eq!(r.capacity().strictest_p95_ns, Some(1_500_000));
}

#[test]
fn malformed_slos_are_refused_naming_the_value() {
    let mut r = registry();
    let cases = [
        (lc(500, 0, 100), "iops = 0"),
        (lc(500, 10, 101), "read_pct = 101"),
        (lc(0, 10, 100), "p95_read_latency_ns = 0"),
    ];
    for (spec, needle) in cases {
        let refusal = r.register(spec).unwrap_err();
        assert_eq!(refusal.code(), RefusalCode::InvalidSlo);
        assert!(refusal.to_string().contains(needle), "{refusal}");
    }
}

#[test]
fn registry_full_is_refused() {
    let mut r = Registry::new(
        DeviceProfile::reflex_a(),
        RegistryConfig {
            max_tenants: 2,
            ..RegistryConfig::default()
        },
    );
    r.register(be(DeclaredMix::Mixed)).expect("1");
    r.register(be(DeclaredMix::Mixed)).expect("2");
    let refusal = r.register(be(DeclaredMix::Mixed)).unwrap_err();
    assert_eq!(refusal.code(), RefusalCode::TooManyTenants);
    assert!(refusal.to_string().contains('2'));
}

#[test]
fn a_best_effort_tenant_that_would_break_read_only_pricing_is_refused() {
    let mut r = registry();
    // 480 K reads/s × 0.5 token = 240 K read-only tokens/s, fine under the read-only column.
    r.register(lc(500, 480_000, 100)).expect("read-only fits");
    r.register(be(DeclaredMix::ReadOnly))
        .expect("read-only BE keeps the mix");
    assert_eq!(r.capacity().mix, LoadMix::ReadOnly);
    assert_eq!(r.capacity().be_share_mtok_per_sec, 260_000_000);
    // A mixed BE tenant would re-price the LC reservation at 480 K tokens/s > 420 K.
    let refusal = r.register(be(DeclaredMix::Mixed)).unwrap_err();
    assert_eq!(refusal.code(), RefusalCode::ReservationsExceedCapacity);
    assert!(refusal.to_string().contains("480000"), "{refusal}");
    assert_eq!(r.capacity().mix, LoadMix::ReadOnly);
}

#[test]
fn a_mix_flip_reprices_admitted_reservations_both_ways() {
    let mut r = registry();
    let a = r.register(lc(500, 100_000, 100)).expect("A");
    assert_eq!(a.reservation_mtok_per_sec(), 50_000_000);
    let c = r.register(be(DeclaredMix::Mixed)).expect("C");
    assert_eq!(a.reservation_mtok_per_sec(), 100_000_000);
    assert_eq!(r.capacity().be_share_mtok_per_sec, 320_000_000);
    r.unregister(c.id()).expect("C leaves");
    assert_eq!(a.reservation_mtok_per_sec(), 50_000_000);
    assert_eq!(r.capacity().mix, LoadMix::ReadOnly);
}

#[test]
fn unregistering_frees_capacity_and_raises_the_be_share() {
    let mut r = registry();
    let a = r.register(lc(500, 120_000, 100)).expect("A");
    r.register(lc(500, 70_000, 80)).expect("B");
    r.register(be(DeclaredMix::Mixed)).expect("C");
    assert_eq!(r.capacity().be_share_mtok_per_sec, 104_000_000);
    r.unregister(a.id()).expect("A leaves");
    assert_eq!(r.capacity().be_share_mtok_per_sec, 224_000_000);
    assert_eq!(
        r.unregister(a.id()),
        Err(RegistryError::UnknownTenant(a.id()))
    );
}

#[test]
fn a_tenant_still_attached_cannot_be_unregistered() {
    let mut r = registry();
    let a = r.register(lc(500, 1000, 100)).expect("A");
    let mut s = Scheduler::new(r.shared(), SchedulerConfig::default()).expect("config");
    let local = s.attach(&a);
    let err = r.unregister(a.id()).unwrap_err();
    assert_eq!(
        err,
        RegistryError::StillAttached {
            id: a.id(),
            workers: 1
        }
    );
    assert!(err.to_string().contains("detach"), "{err}");
    let mut unsent = Vec::new();
    s.detach(local, &mut unsent).expect("attached");
    r.unregister(a.id()).expect("now it can go");
}

#[test]
fn no_lc_tenant_gives_be_the_loosest_rate() {
    let mut r = registry();
    r.register(be(DeclaredMix::Mixed)).expect("C");
    r.register(be(DeclaredMix::Mixed)).expect("D");
    assert_eq!(r.capacity().device_rate_mtok_per_sec, 570_000_000);
    assert_eq!(r.capacity().be_share_mtok_per_sec, 285_000_000);
}

#[test]
fn closed_loop_scale_lowers_capacity_without_evicting() {
    let mut r = registry();
    r.register(lc(500, 300_000, 100)).expect("A");
    r.register(be(DeclaredMix::Mixed)).expect("C");
    assert_eq!(r.capacity().be_share_mtok_per_sec, 120_000_000);
    r.set_rate_scale_ppm(900_000).expect("valid");
    assert_eq!(r.capacity().device_rate_mtok_per_sec, 378_000_000);
    assert_eq!(r.capacity().be_share_mtok_per_sec, 78_000_000);
    r.set_rate_scale_ppm(500_000).expect("valid");
    // 210 K < 300 K reserved: nobody is evicted, BE gets nothing, newcomers are refused.
    assert_eq!(r.capacity().be_share_mtok_per_sec, 0);
    assert_eq!(r.capacity().lc_tenants, 1);
    assert_eq!(
        r.register(lc(500, 1, 100)).unwrap_err().code(),
        RefusalCode::ReservationsExceedCapacity
    );
    let err = r.set_rate_scale_ppm(0).unwrap_err();
    assert!(err.to_string().contains("0 ppm"), "{err}");
}

#[test]
fn check_is_a_dry_run() {
    let r = registry();
    assert_eq!(r.check(&lc(500, 70_000, 80)), Ok(196_000_000));
    assert_eq!(r.tenants().count(), 0);
}

#[test]
fn the_lc_surge_comes_out_of_the_unreserved_rate_before_the_be_share() {
    // Default configuration: LC tenants earn up to 50 % above their reservations.
    let mut r = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
    let lc_tenant = r.register(lc(500, 20_000, 90)).expect("fits");
    r.register(be(DeclaredMix::Mixed)).expect("BE");
    // 20 K IOPS × (0.9 + 0.1 × 10) = 38 K tokens/s reserved; 50 % more is 19 K of the 382 K
    // unreserved; the BE tenant's share is the remaining 363 K.
    assert_eq!(lc_tenant.reservation_mtok_per_sec(), 38_000_000);
    let cap = r.capacity();
    assert_eq!(cap.lc_surge_ppm, 500_000);
    assert_eq!(cap.be_share_mtok_per_sec, 363_000_000);
    assert_eq!(
        qos::lc_earning_rate_mtok_per_sec(38_000_000, cap.lc_surge_ppm),
        57_000_000
    );

    // The published scenario 1 leaves 104 K unreserved; the surge may take half of it (52 K),
    // less than 50 % of the 316 K reserved: it shrinks to 164 556 ppm (51 999 696 mtok/s in
    // all), and the BE tenants share the other 52 000 304.
    let mut r = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
    r.register(lc(500, 120_000, 100)).expect("A");
    r.register(lc(500, 70_000, 80)).expect("B");
    r.register(be(DeclaredMix::Mixed)).expect("C");
    r.register(be(DeclaredMix::Mixed)).expect("D");
    let cap = r.capacity();
    assert_eq!(cap.lc_surge_ppm, 164_556);
    assert_eq!(cap.be_share_mtok_per_sec, 26_000_152);
    // Everything LC tenants can earn plus the BE shares stays within the device rate.
    let lc_earning = qos::lc_earning_rate_mtok_per_sec(120_000_000, cap.lc_surge_ppm)
        + qos::lc_earning_rate_mtok_per_sec(196_000_000, cap.lc_surge_ppm);
    assert!(lc_earning + 2 * cap.be_share_mtok_per_sec <= 420_000_000);
    assert!(lc_earning + 2 * cap.be_share_mtok_per_sec > 420_000_000 - 1_000);

    // A device fully reserved has no surge to give (admitted with the published rule: no
    // headroom kept).
    let published = RegistryConfig {
        headroom: qos::AdmissionHeadroom::Off,
        ..RegistryConfig::default()
    };
    let mut r = Registry::new(DeviceProfile::reflex_a(), published);
    r.register(lc(500, 420_000, 100))
        .expect("exactly the device, mixed pricing");
    r.register(be(DeclaredMix::Mixed)).expect("BE");
    assert_eq!(r.capacity().lc_surge_ppm, 0);
    assert_eq!(r.capacity().be_share_mtok_per_sec, 0);
    // And with no LC tenant there is nothing to surge.
    let mut r = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
    r.register(be(DeclaredMix::Mixed)).expect("BE");
    assert_eq!(r.capacity().lc_surge_ppm, 0);
    assert_eq!(r.capacity().be_share_mtok_per_sec, 570_000_000);
}
