"""Time: the serving simulation, scenarios and the command line. The only package that imports simpy."""
