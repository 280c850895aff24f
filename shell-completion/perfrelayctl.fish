# SPDX-License-Identifier: LGPL-2.1-or-later
# fish completion for perfrelayctl(1): commands, each command's options (the same lists as
# 'perfrelayctl COMMAND --help'; tests/unit/test_completion.py compares them) and their values:
# probe names and record types from the running daemon, unit names from systemd.

function __perfrelayctl_probes
    set -l names (perfrelayctl probes --no-legend 2>/dev/null | string replace -r '\s.*' '')
    test (count $names) -gt 0; or set names exec exit fork open connect
    printf '%s\n' $names
end

function __perfrelayctl_types
    printf '%s\n' exec exit fork open connect bench counters packet
    perfrelayctl producers --types 2>/dev/null
end

function __perfrelayctl_units
    systemctl list-units --all --full --plain --no-legend --type=service,scope,slice,socket 2>/dev/null | string replace -r '\s.*' ''
end

set -l verbs monitor query status stats snapshot snapshots capture top producers probes clients tree probe help
complete -c perfrelayctl -f
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -s h -l help -d 'Show this help'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -l version -d 'Show the version'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a monitor -d 'Show events as they happen'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a query -d "Show the events of the daemon's history"
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a status -d "Show the daemon's state, rates and loss"
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a stats -d 'Show every counter'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a snapshot -d "Show the flight recorder's latest events"
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a snapshots -d 'List the snapshots saved when units failed'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a capture -d "Capture a unit's packets as pcapng"
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a top -d 'Show the units using the most CPU per second'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a producers -d 'List the producers, their record types and counters'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a probes -d 'List the built-in probes'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a clients -d 'List the socket subscribers'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a tree -d 'Show the live processes as a forest'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a probe -d 'Attach or detach a probe'
complete -c perfrelayctl -n "not __fish_seen_subcommand_from $verbs" -a help -d 'Show the commands'

for verb in monitor query status stats snapshot snapshots capture top producers probes clients tree probe
    complete -c perfrelayctl -n "__fish_seen_subcommand_from $verb" -s h -l help -d 'Show this help'
end

complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -s t -l type -x -a '(__perfrelayctl_types)' -d 'Only events of this type'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -s p -l pid -x -a '(__fish_complete_pids)' -d 'Only events of this process'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -s u -l uid -x -a '(__fish_complete_users)' -d 'Only events of this user'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -s c -l comm -x -d 'Only events of this task name'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l unit -x -a '(__perfrelayctl_units)' -d 'Only events from this unit'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l container -x -d 'Only events in this container (name, image or id)'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l ancestor -x -d 'Only events of descendants of this process, unit or exec id'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -s j -l json -d "Print the daemon's JSON lines"
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l socket -r -F -d 'The event socket'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l nats -x -d 'Read the fleet events from NATS JetStream'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l stream -x -d 'The JetStream stream'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l host -x -d 'Only events of this host'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l since -x -d 'From this long ago'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l no-follow -d 'Stop at the end of the stream'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor' -l cursors -d 'Read through the history, each line with its cursor'
complete -c perfrelayctl -n '__fish_seen_subcommand_from monitor query' -l after-cursor -x -d 'After this cursor'

complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s S -l since -x -d 'Events since this long ago'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s U -l until -x -d 'Events until this long ago'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s t -l type -x -a '(__perfrelayctl_types)' -d 'Only events of this type'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s p -l pid -x -a '(__fish_complete_pids)' -d 'Only events of this process'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s u -l uid -x -a '(__fish_complete_users)' -d 'Only events of this user'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s c -l comm -x -d 'Only events of this task name'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -l unit -x -a '(__perfrelayctl_units)' -d 'Only events from this unit'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -l ancestor -x -d 'Only events of descendants of this process, unit or exec id'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s o -l output -x -a 'short json' -d 'Output mode'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s n -l lines -x -d 'Only the last N events'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -s r -l reverse -d 'Newest first'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -l cursors -d 'Lines carry their cursor'
complete -c perfrelayctl -n '__fish_seen_subcommand_from query' -l socket -r -F -d 'The event socket'

complete -c perfrelayctl -n '__fish_seen_subcommand_from status stats' -s j -l json -d 'One JSON object'

complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -l since -x -d 'Only the last SPAN'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -l unit -x -a '(__perfrelayctl_units)' -d 'Only events of this unit'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -l ancestor -x -d 'Only events of descendants of this process, unit or exec id'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -s t -l type -x -a '(__perfrelayctl_types)' -d 'Only events of this type'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -s p -l pid -x -a '(__fish_complete_pids)' -d 'Only events of this process'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -s j -l json -d 'JSON lines'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -s o -l output -r -F -d 'Write to FILE'
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -l save -x -a '(__perfrelayctl_units)' -d "Save the unit's events"
complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshot' -l directory -x -a '(__fish_complete_directories)' -d 'The snapshot directory'

complete -c perfrelayctl -n '__fish_seen_subcommand_from snapshots' -s d -l directory -x -a '(__fish_complete_directories)' -d 'The snapshot directory'

complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -l unit -x -a '(__perfrelayctl_units)' -d 'The unit whose packets to capture'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -l cgroup -x -d 'A cgroup below the cgroup2 root'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -l container -x -d 'A container (name, image or id)'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -s i -l interface -x -a '(__fish_print_interfaces)' -d 'Every packet of an interface'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -s w -l write -r -F -d 'Write pcapng to FILE'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -s c -l count -x -d 'Stop after N packets'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -s s -l snaplen -x -d 'Bytes per packet'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -l direction -x -a 'ingress egress both' -d 'Which direction'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -l rate -x -d 'At most N packets per second'
complete -c perfrelayctl -n '__fish_seen_subcommand_from capture' -l socket -r -F -d 'The event socket'

complete -c perfrelayctl -n '__fish_seen_subcommand_from top' -l by -x -a 'counters events' -d 'Rank units by perf counters or by records'
complete -c perfrelayctl -n '__fish_seen_subcommand_from top' -s o -l order -x -a 'task-clock context-switches page-faults cpu-migrations cycles instructions cache-misses branch-misses events lost' -d 'Sort by this counter'
complete -c perfrelayctl -n '__fish_seen_subcommand_from top' -s d -l delay -x -d 'Seconds between refreshes'
complete -c perfrelayctl -n '__fish_seen_subcommand_from top' -s n -l iterations -x -d 'Stop after N refreshes'
complete -c perfrelayctl -n '__fish_seen_subcommand_from top' -s b -l batch -d 'Plain tables'
complete -c perfrelayctl -n '__fish_seen_subcommand_from top' -s j -l json -d 'JSON arrays'

complete -c perfrelayctl -n '__fish_seen_subcommand_from producers' -s j -l json -d 'One JSON array'
complete -c perfrelayctl -n '__fish_seen_subcommand_from producers' -l types -d 'Only the record type names'

complete -c perfrelayctl -n '__fish_seen_subcommand_from probes' -l no-legend -d 'No header line'

complete -c perfrelayctl -n '__fish_seen_subcommand_from probe; and not __fish_seen_subcommand_from enable disable' -a 'enable disable'
complete -c perfrelayctl -n '__fish_seen_subcommand_from probe; and __fish_seen_subcommand_from enable disable' -a '(__perfrelayctl_probes)'

complete -c perfrelayctl -n '__fish_seen_subcommand_from tree' -s p -l pid -x -a '(__fish_complete_pids)' -d 'Only this process and its descendants'
complete -c perfrelayctl -n '__fish_seen_subcommand_from tree' -l unit -x -a '(__perfrelayctl_units)' -d 'Only the processes of this unit'
complete -c perfrelayctl -n '__fish_seen_subcommand_from tree' -s j -l json -d 'One JSON array'
