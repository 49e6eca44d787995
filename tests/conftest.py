from pipeline.common import limit_cpu_threads

# The stages' policy (pipeline.common.limit_cpu_threads) for the tests that train models in this process: tiny models
# gain nothing from intra-op threads, and a busy 2-core CI machine loses a lot to oversubscription.
limit_cpu_threads()
