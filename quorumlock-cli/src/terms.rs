//! The library's names in its messages (`Nodes::fencing_on_volatile_nodes`), and what a
//! command-line user writes instead (`--fencing-on-volatile-nodes`): the library's
//! wording stays the library's, for its own users, and is translated for the command
//! line's. Below `explain` and `node_url`, which both translate.

/// The library's names in its messages, and what a command-line user writes instead.
const TRANSLATIONS: [(&str, &str); 7] = [
    (
        "Nodes::fencing_on_volatile_nodes",
        "--fencing-on-volatile-nodes",
    ),
    (
        "LockConfig::fencing_on_volatile_nodes",
        "--fencing-on-volatile-nodes",
    ),
    // Commas separate the nodes on the command line: a cluster's seeds take semicolons.
    (
        "redis+cluster://host:port,host:port",
        "redis+cluster://host:port;host:port",
    ),
    ("Nodes::longest_lease", "--longest-lease"),
    (
        "Nodes::restart_abstention(false)",
        "--no-restart-abstention",
    ),
    (
        "Nodes::strict_members",
        "the library's Nodes::strict_members",
    ),
    (
        "or opt in with Nodes::sentinel_members",
        "or opt in with the library's Nodes::sentinel_members (the command line has no such \
         option)",
    ),
];

/// `text` with the library's names replaced by the command line's.
pub fn in_cli_terms(text: &str) -> String {
    TRANSLATIONS
        .iter()
        .fold(text.to_owned(), |text, (library, cli)| {
            text.replace(library, cli)
        })
}
