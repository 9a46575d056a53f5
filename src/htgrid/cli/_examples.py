"""An example for each command's --help: what a user types, as the README and docs show it.

Kept here, one table, rather than in each command's module, so that `htgrid X --help`
always ends with one (tests/cli/test_help_examples.py checks every command has one) and
the examples read alike.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import Any, Final

__all__ = ["EXAMPLES", "attach"]

#: Each command (its words after `htgrid`; "": `htgrid` itself) and example lines, each
#: `command  # what it does`.
EXAMPLES: Final[dict[str, str]] = {
    "": """\
htgrid up                            # a personal pool in ~/.htgrid ($HTGRID_HOME)
htgrid submit job.sub
htgrid q
htgrid down
htgrid q --help                      # each command's help ends with examples""",
    "classad": """\
htgrid classad eval 'strcat("a", 1 + 1)'
htgrid classad match job.ad machines.ad""",
    "classad eval": """\
htgrid classad eval 'stringListMember("b", "a,b,c")'
htgrid classad eval -f job.ad -- 'RequestMemory * 1024'
htgrid classad eval -f job.ad -t machine.ad 'TARGET.Memory >= MY.RequestMemory'""",
    "classad match": """\
htgrid classad match job.ad machines.ad       # which Requirements clause fails, per machine
htgrid classad match -v job.ad machines.ad    # every clause""",
    "gahp": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp batch   # the grid manager starts these""",
    "gahp batch": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp batch --scratch /tmp/batch-gahp""",
    "gahp ec2": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp ec2 --region eu-west-1    # needs htgrid[ec2]""",
    "gahp azure": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp azure --retries 5         # needs htgrid[azure]""",
    "gahp condor": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp condor -P cm.example.org:9618 -s schedd@site.example""",
    "gahp arc": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp arc --proxy /tmp/x509up_u$(id -u)""",
    "gahp gram": """\
printf 'COMMANDS\\nQUIT\\n' | htgrid gahp gram --proxy /tmp/x509up_u$(id -u)""",
    "gridmanager": """\
htgrid gridmanager --log - -v        # in the foreground (htgrid up starts one)""",
    "collector": """\
htgrid collector --port 9618         # in the foreground (htgrid up starts one)""",
    "status": """\
htgrid status                        # slots, with totals
htgrid status -grid                  # the grid manager's resources
htgrid status -schedd -af Name HTGridURL
htgrid status -constraint 'State == "Unclaimed"' -l""",
    "advertise": """\
htgrid advertise -multiple UPDATE_STARTD_AD sites.ad
htgrid advertise INVALIDATE_STARTD_ADS query.ad""",
    "startd": """\
htgrid startd                        # this pool's execute node, in the foreground
htgrid startd -pool cm.example.org:9618   # join another host's pool (with its token)""",
    "token": """\
htgrid token create -identity alice@pool.example -token alice
htgrid token list
htgrid token revoke -token alice""",
    "token create": """\
htgrid token create -identity alice@$(htgrid config_val TRUST_DOMAIN) -lifetime 86400
htgrid token create -identity node7@pool.example -authz ADVERTISE_STARTD -token /tmp/node7""",
    "token list": """\
htgrid token list""",
    "token revoke": """\
htgrid token revoke -token /tmp/node7
htgrid token revoke -jti 3f2a9c0e5b7d4e1a""",
    "trust": """\
htgrid trust add site.example site-ca.crt
htgrid trust list
htgrid trust remove site.example""",
    "trust add": """\
htgrid trust add site.example site-ca.crt   # the file `config_val TRUST_DOMAIN_CAFILE` names there""",
    "trust list": """\
htgrid trust list""",
    "trust remove": """\
htgrid trust remove site.example""",
    "config_val": """\
htgrid config_val COLLECTOR_HOST TRUST_DOMAIN
htgrid config_val -verbose NEGOTIATOR_INTERVAL
htgrid config_val -dump GRIDMANAGER""",
    "up": """\
htgrid up                            # the whole pool on this host
htgrid up -no-execute                # no execute node here
HTGRID_HOME=/tmp/pool2 htgrid up     # a second pool, with its own home""",
    "down": """\
htgrid down""",
    "reconfig": """\
htgrid reconfig                      # after editing htgrid.conf: routes, SYSTEM_PERIODIC_*""",
    "submit": """\
htgrid submit hello.sub
htgrid submit job.sub site_schedd=schedd@site.example site_pool=127.0.0.1:9618
htgrid submit -dry-run - hello.sub   # print the job ads, submit nothing
htgrid submit -append 'request_memory = 2G' -queue 10 job.sub""",
    "q": """\
htgrid q                             # your jobs, a line per batch
htgrid q -nobatch 12                 # cluster 12, a line per job
htgrid q -better-analyze 12.0        # why it is not running
htgrid q -af ClusterId ProcId JobStatus -constraint 'JobStatus == 5'
htgrid q -grid -name schedd@site.example -pool 127.0.0.1:9618""",
    "rm": """\
htgrid rm 12.3
htgrid rm -constraint 'JobStatus == 5' -reason 'cleaning up'""",
    "hold": """\
htgrid hold 12 -reason 'input not ready'""",
    "release": """\
htgrid release 12
htgrid release -constraint 'HoldReasonCode == 16'""",
    "qedit": """\
htgrid qedit 12 RequestMemory 4096
htgrid qedit 12.0 Comment '"a string, quoted"'""",
    "history": """\
htgrid history -limit 10
htgrid history 12 -af ClusterId ProcId ExitCode
htgrid history -constraint 'ExitCode != 0' -l""",
    "wait": """\
htgrid wait hello.log
htgrid wait -wait 300 12             # give up after 5 minutes (exit 1)""",
    "job_router": """\
htgrid job_router --log - -v         # in the foreground (JOB_ROUTER in DAEMON_LIST starts it)""",
    "job_router_info": """\
htgrid job_router_info -config
htgrid q -l 12.0 | htgrid job_router_info -match-jobs -jobads -""",
    "router_q": """\
htgrid router_q
htgrid router_q -S                   # a count per route and state""",
    "transform_ads": """\
htgrid transform_ads -rules route.rules -jobads job.ad""",
    "web": """\
htgrid web -port 8080                # then open the URL it prints
htgrid web -url                      # the address other users sign in at""",
    "annex": """\
htgrid annex setup --region us-east-1
htgrid annex create --count 2 --lifetime 2h --image-ids ami-0abc1234 burst
htgrid annex status burst
htgrid annex shutdown burst""",
    "annex setup": """\
htgrid annex setup --region us-east-1""",
    "annex create": """\
htgrid annex create --count 2 --lifetime 2h --image-ids ami-0abc1234 burst
htgrid annex create --slots 16 --spot-price 0.10 --instance-types m5.large:2,m5.xlarge:4 \\
    --image-ids ami-0abc1234 --lifetime 90m spotty""",
    "annex add": """\
htgrid annex add --count 2 burst""",
    "annex extend": """\
htgrid annex extend --lifetime 4h burst""",
    "annex status": """\
htgrid annex status
htgrid annex status -json burst""",
    "annex list": """\
htgrid annex list --region us-east-1""",
    "annex shutdown": """\
htgrid annex shutdown burst""",
    "ce": """\
htgrid ce up --batch slurm
htgrid ce trace ce.example.org
htgrid ce down""",
    "ce up": """\
htgrid ce up --batch slurm           # a new CE routing to Slurm, its collector on 9619
htgrid ce up --batch 'condor schedd@site.example 127.0.0.1:9618'""",
    "ce down": """\
htgrid ce down""",
    "ce trace": """\
htgrid ce trace ce.example.org       # port 9619
htgrid ce trace -d ce.example.org:9619""",
}


def attach(parser: Any, words: tuple[str, ...] = ()) -> None:
    """Give `parser` (an htgrid ArgumentParser) and each command under it its examples."""
    example = EXAMPLES.get(" ".join(words))
    if example is not None and not parser.epilog:
        # The raw formatter keeps the example's lines; the description, which it would
        # print as one long line, is wrapped here as argparse would have wrapped it.
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.description = _wrapped(parser.description)
        parser.epilog = "examples:\n" + _indent(example)
    for name, sub in parser.subcommands().items():
        attach(sub, (*words, name))


def _wrapped(text: str | None) -> str | None:
    if not text:
        return text
    width = min(shutil.get_terminal_size().columns - 2, 78)
    paragraphs = (" ".join(part.split()) for part in text.split("\n\n"))
    return "\n\n".join(textwrap.fill(part, width) for part in paragraphs)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
