//! Words that match the behaviour (issue 72, item 7): the help texts name
//! rocBLAS where it is built and installed, and `profiles list` names
//! what each profile builds. On 84ed257 `build --help` said "(today:
//! miopen)" and `profiles list` named MIOpen only, though rocm-6.4.3 also
//! pins rocBLAS.

use crate::support::Sandbox;

#[test]
fn help_and_profiles_list_name_rocblas_where_it_is_built() {
    let sb = Sandbox::new();
    let build = sb.run(&["build", "--help"]).ok().stdout;
    assert!(
        build.contains("rocblas") && !build.contains("today: miopen"),
        "{build}"
    );
    let install = sb.run(&["install", "--help"]).ok().stdout;
    assert!(install.contains("rocBLAS"), "{install}");
    let list = sb.run(&["profiles", "list"]).ok().stdout;
    for line in list.lines() {
        let name = line.split([' ', '\t']).next().unwrap();
        let text = sb.run(&["profiles", "show", name]).ok().stdout;
        let pins_rocblas = text.contains("[components.rocblas]");
        assert_eq!(
            line.contains("builds miopen, rocblas"),
            pins_rocblas,
            "{line}"
        );
        assert!(line.contains("builds miopen"), "{line}");
    }
}
