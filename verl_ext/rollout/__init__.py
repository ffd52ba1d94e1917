"""Multi-turn multimodal tool rollout: verl agent loops for the Neos and ModalSearcher protocols."""
