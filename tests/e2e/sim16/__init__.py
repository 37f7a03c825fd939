"""One private copy of sim-16 for every sixteen-node check, brought up once for the package
(modules run in name order):

1. the switch, on the fresh rack: every node answers, the f0 halves reach each other through it,
   an uncabled port has no carrier (each check puts its ports back as it found them);
2. every role through the real engine, `pulumi up` from fresh nodes;
3. layer-aware weights split TP=2 x PP=8 by the weights program, on the same nodes beside the
   running deployment (its own project and state; only weights cross the fabric then).

With fs.inotify.max_user_instances at 128, two sim-16 racks at once do not start, and each costs
about a minute to bring up and remove: one rack serves all three.
"""
