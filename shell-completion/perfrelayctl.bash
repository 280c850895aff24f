# SPDX-License-Identifier: LGPL-2.1-or-later
# bash completion for perfrelayctl(1): commands, each command's options (the same lists as
# 'perfrelayctl COMMAND --help'; tests/unit/test_completion.py compares them) and their values:
# probe names and record types from the running daemon, unit names from systemd.
# shellcheck shell=bash

__perfrelayctl_probes() {
	local names
	names=$(perfrelayctl probes --no-legend 2>/dev/null | awk '{ print $1 }')
	# Without a daemon to ask: the built-in probes.
	printf '%s\n' "${names:-exec exit fork open connect}"
}

__perfrelayctl_types() {
	# The built-in record types, then those the daemon's producers declare.
	printf '%s\n' exec exit fork open connect bench counters packet
	perfrelayctl producers --types 2>/dev/null
}

__perfrelayctl_units() {
	systemctl list-units --all --full --plain --no-legend --type=service,scope,slice,socket 2>/dev/null |
		awk '{ print $1 }'
}

_perfrelayctl() {
	local cur prev words cword split
	_init_completion -s || return

	local verbs='monitor query status stats snapshot snapshots capture top producers probes clients tree probe help'
	local -A opts=(
		[monitor]='-t --type -p --pid -u --uid -c --comm --unit --container --ancestor -j --json --socket --cursors --after-cursor --nats --stream --host --since --no-follow -h --help'
		[query]='-S --since -U --until --after-cursor -t --type -p --pid -u --uid -c --comm --unit --ancestor -o --output -n --lines -r --reverse --cursors --socket -h --help'
		[status]='-j --json -h --help'
		[stats]='-j --json -h --help'
		[snapshot]='--since --unit -t --type -p --pid --ancestor -j --json -o --output --save --directory -h --help'
		[snapshots]='-d --directory -h --help'
		[capture]='--unit --cgroup --container -i --interface -w --write -c --count -s --snaplen --direction --rate --socket -h --help'
		[top]='--by -o --order -d --delay -n --iterations -b --batch -j --json -h --help'
		[producers]='-j --json --types -h --help'
		[probes]='--no-legend -h --help'
		[clients]='-h --help'
		[tree]='-p --pid --unit -j --json -h --help'
		[probe]='-h --help'
		[help]=''
	)

	local verb='' i
	for ((i = 1; i < cword; i++)); do
		if [[ ${words[i]} != -* ]]; then
			verb=${words[i]}
			break
		fi
	done

	if [[ -z $verb ]]; then
		if [[ $cur == -* ]]; then
			mapfile -t COMPREPLY < <(compgen -W '-h --help --version' -- "$cur")
		else
			mapfile -t COMPREPLY < <(compgen -W "$verbs" -- "$cur")
		fi
		return
	fi

	case $prev in
	-t | --type)
		mapfile -t COMPREPLY < <(compgen -W "$(__perfrelayctl_types)" -- "$cur")
		return
		;;
	--unit | --save)
		mapfile -t COMPREPLY < <(compgen -W "$(__perfrelayctl_units)" -- "$cur")
		return
		;;
	-u | --uid)
		mapfile -t COMPREPLY < <(compgen -u -- "$cur")
		return
		;;
	-i | --interface)
		mapfile -t COMPREPLY < <(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")
		return
		;;
	--direction)
		mapfile -t COMPREPLY < <(compgen -W 'ingress egress both' -- "$cur")
		return
		;;
	--by)
		mapfile -t COMPREPLY < <(compgen -W 'counters events' -- "$cur")
		return
		;;
	-o | --order)
		if [[ $verb == top ]]; then
			mapfile -t COMPREPLY < <(compgen -W 'task-clock context-switches page-faults cpu-migrations cycles instructions cache-misses branch-misses events lost' -- "$cur")
			return
		fi
		_filedir
		return
		;;
	-w | --write | --socket)
		_filedir
		return
		;;
	-d | --directory)
		if [[ $verb != top ]]; then
			_filedir -d
			return
		fi
		return
		;;
	-p | --pid)
		_pids
		return
		;;
	--cgroup | --container | --since | --nats | --stream | --host | -c | --comm | --count | -s | --snaplen | --rate | -n | --iterations)
		return
		;;
	esac
	[[ $split == true ]] && return

	if [[ $verb == probe ]]; then
		# probe enable|disable NAME
		local args=() w
		for w in "${words[@]:i+1:cword-i-1}"; do
			[[ $w == -* ]] || args+=("$w")
		done
		case ${#args[@]} in
		0) mapfile -t COMPREPLY < <(compgen -W 'enable disable -h --help' -- "$cur") ;;
		1) mapfile -t COMPREPLY < <(compgen -W "$(__perfrelayctl_probes)" -- "$cur") ;;
		esac
		return
	fi

	if [[ -v "opts[$verb]" ]]; then
		mapfile -t COMPREPLY < <(compgen -W "${opts[$verb]}" -- "$cur")
		[[ ${COMPREPLY[0]-} == *= ]] && compopt -o nospace
	fi
}

complete -F _perfrelayctl perfrelayctl
