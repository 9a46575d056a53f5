#!/usr/bin/env python3
"""The job-router transform hook of the 2013 post that introduced the ClassAd bindings
("Fun with ClassAds", OSG Technology blog), written for the version-1 `classad` module.

It reads the route ad (new syntax, one line), a line of dashes, and the job ad (old
syntax) on stdin, and writes the changed job ad to stdout. It runs on htgrid unchanged
but for the import below (with HTCondor's own bindings up to 24: `import classad`), and
for `print`, a statement in the Python 2 of the post.
"""

import sys

import htgrid.classad as classad

route_ad = classad.ClassAd(sys.stdin.readline())
separator_line = sys.stdin.readline()
assert separator_line == "------\n"
ad = classad.parseOld(sys.stdin)

ad["Universe"] = 5
ad["GridResource"] = "condor localhost localhost"
if "x509UserProxyFirstFQAN" in ad and "/cms" in ad.eval("x509UserProxyFirstFQAN"):
    ad["AccountingGroup"] = "cms.%s" % ad.eval("Owner")  # noqa: UP031 - as the post has it
else:
    ad["AccountingGroup"] = "other.%s" % ad.eval("Owner")  # noqa: UP031

print(ad.printOld())
