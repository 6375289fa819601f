"""The model classes vLLM 0.33.0 registers, as data, and which of them gpulaunch refuses to size.

``VLLM_REGISTRY`` holds the keys of the registries in vllm/model_executor/models/registry.py of the
vLLM 0.33.0 wheel (``_TEXT_GENERATION_MODELS``; the pooling ones: ``_EMBEDDING_MODELS``,
``_LATE_INTERACTION_MODELS``, ``_REWARD_MODELS``, ``_TOKEN_CLASSIFICATION_MODELS``,
``_SEQUENCE_CLASSIFICATION_MODELS``; ``_MULTIMODAL_MODELS``; ``_SPECULATIVE_DECODING_MODELS``; the
Transformers backend's), read once, by class name (config.json's ``architectures[0]``). A model of
any other class is sized from its config.json by gpulaunch's rules for its ``model_type``
(modelfile/hfconfig.py, fit/kv_vllm.py); the classes below whose memory vLLM keeps in a cache those
rules do not know are refused with the reason (exit 7), never sized low. tests/test_engine_archs.py
walks the registry (and the installed vLLM's, where there is one).
"""

from __future__ import annotations

__all__ = ["VLLM_VERSION", "VLLM_REGISTRY", "REFUSED", "refusal"]

VLLM_VERSION = "0.33.0"

VLLM_REGISTRY: dict[str, tuple[str, ...]] = {
    "text generation": (
        "AfmoeForCausalLM", "AliceAIForCausalLM", "ApertusForCausalLM", "AXK1ForCausalLM",
        "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM", "BeamForCausalLM", "BloomForCausalLM", "ChatGLMModel",
        "ChatGLMForConditionalGeneration", "CohereForCausalLM", "Cohere2ForCausalLM", "Cohere2MoeForCausalLM",
        "DbrxForCausalLM", "DeciLMForCausalLM", "DeepseekForCausalLM", "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "DomynEdgeForCausalLM",
        "DoryForCausalLM", "Ernie4_5ForCausalLM", "Ernie4_5_MoeForCausalLM", "ExaoneForCausalLM",
        "Exaone4ForCausalLM", "ExaoneMoeForCausalLM", "ExaoneMoEForCausalLM", "FalconForCausalLM",
        "FalconMambaForCausalLM", "FalconH1ForCausalLM", "FlintForCausalLM", "GemmaForCausalLM",
        "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Rnj1ForCausalLM", "Gemma3nForCausalLM", "Gemma4ForCausalLM",
        "Qwen3NextForCausalLM", "Qwen4ExpForCausalLM", "Glm4ForCausalLM", "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "Glm5NextForCausalLM", "GptOssForCausalLM",
        "GPT2LMHeadModel", "GPTJForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
        "GraniteMoeHybridForCausalLM", "GraniteMoeSharedForCausalLM", "GraniteMoeSWAForCausalLM",
        "GraniteSWAForCausalLM", "HrmTextForCausalLM", "HYV3ForCausalLM", "HYV4ForCausalLM",
        "HCXVisionV2ForCausalLM", "HyperCLOVAXForCausalLM", "InternLM2ForCausalLM", "InternLM3ForCausalLM",
        "IQuestCoderForCausalLM", "IQuestLoopCoderForCausalLM", "JambaForCausalLM", "K2HorizonForCausalLM",
        "KimiLinearForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "LagunaForCausalLM",
        "LlamaForCausalLM", "Llama4ForCausalLM", "LLaMAForCausalLM", "LongcatFlashForCausalLM",
        "LongcatFlashNgramForCausalLM", "MambaForCausalLM", "Mamba2ForCausalLM", "MiniCPMForCausalLM",
        "MiniCPM3ForCausalLM", "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM", "InklingForCausalLM",
        "InklingForConditionalGeneration", "Ministral3ForCausalLM", "MistralForCausalLM",
        "MistralLarge3ForCausalLM", "MixtralForCausalLM", "MiMoForCausalLM", "MiMoV2FlashForCausalLM",
        "MiMoV2ForCausalLM", "NemotronForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
        "MuseGlimmerForCausalLM", "OlmoHybridForCausalLM", "OlmoeForCausalLM", "OPTForCausalLM",
        "OrionForCausalLM", "PanguEmbeddedForCausalLM", "PanguProMoEV2ForCausalLM", "PanguUltraMoEForCausalLM",
        "Param2MoEForCausalLM", "Phi3ForCausalLM", "PhiMoEForCausalLM", "Plamo3ForCausalLM", "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM", "SarvamMoEForCausalLM", "SarvamMLAForCausalLM", "Step1ForCausalLM",
        "Step3TextForCausalLM", "Step3p5ForCausalLM", "Step5ForCausalLM", "StableLmForCausalLM",
        "SolarForCausalLM", "TeleChat2ForCausalLM", "TeleChat3ForCausalLM", "TeleFLMForCausalLM",
        "Zamba2ForCausalLM",
    ),
    "pooling": (
        "BertModel", "BertForMaskedLM", "BertSpladeSparseEmbeddingModel", "BgeM3EmbeddingModel",
        "DeciLMForCausalLM", "DeepseekV3BidirectionalModel", "Gemma2Model", "Gemma3TextModel", "GteModel",
        "GteNewModel", "JinaEmbeddingsV5Model", "Lfm2BidirectionalModel", "LlamaBidirectionalModel",
        "LlamaModel", "MistralModel", "ModernBertModel", "NomicBertModel", "Phi3ForCausalLM", "Qwen2Model",
        "Qwen2ForCausalLM", "RobertaForMaskedLM", "RobertaModel", "TeleChat2ForCausalLM",
        "VoyageQwen3BidirectionalEmbedModel", "XLMRobertaModel", "CLIPModel", "ColPaliForRetrieval",
        "EmbeddingGemma2Model", "LlamaNemotronVLModel", "LlavaNextForConditionalGeneration", "Phi3VForCausalLM",
        "Qwen2VLForConditionalGeneration", "SiglipModel", "Terratorch", "HF_ColBERT", "ColBERTModernBertModel",
        "ColBERTJinaRobertaModel", "ColBERTLfm2Model", "JinaForRanking", "ColModernVBertForRetrieval",
        "ColUltraVBertForRetrieval", "ModernVBertModel", "ColQwen3", "OpsColQwen3Model", "ColQwen3_5",
        "Qwen3VLNemotronEmbedModel", "InternLM2ForRewardModel", "Qwen2ForRewardModel",
        "Qwen2ForProcessRewardModel", "BertForTokenClassification", "ClefFlashForJointSchema",
        "ClefOmniForJointSchema", "ModernBertForTokenClassification",
        "OpenAIPrivacyFilterForTokenClassification", "Qwen3ASRForcedAlignerForTokenClassification",
        "RobertaForTokenClassification", "XLMRobertaForTokenClassification", "BertForSequenceClassification",
        "GPT2ForSequenceClassification", "GteNewForSequenceClassification", "JambaForSequenceClassification",
        "LlamaBidirectionalForSequenceClassification", "ModernBertForSequenceClassification",
        "RobertaForSequenceClassification", "XLMRobertaForSequenceClassification", "D3ForSequenceClassification",
        "JinaVLForRanking", "LlamaNemotronVLForSequenceClassification",
    ),
    "multimodal": (
        "Alpamayo2Super", "AriaForConditionalGeneration", "AudioFlamingo3ForConditionalGeneration",
        "BagelForConditionalGeneration", "BailingMoeV3VLForConditionalGeneration", "BeeForConditionalGeneration",
        "Blip2ForConditionalGeneration", "Cohere2VisionForConditionalGeneration",
        "CohereCompassForConditionalGeneration", "Cosmos3ForConditionalGeneration",
        "Cosmos3EdgeForConditionalGeneration", "DeepseekVLV2ForCausalLM", "DeepseekOCRForCausalLM",
        "DeepseekOCR2ForCausalLM", "DeepseekV4ForConditionalGeneration", "DeepseekV41ForCausalLM",
        "Dots3NoteForCausalLM", "UnlimitedOCRForCausalLM", "DotsOCRForCausalLM",
        "Eagle2_5_VLForConditionalGeneration", "Ernie4_5_VLMoeForConditionalGeneration",
        "Exaone4_5_ForConditionalGeneration", "FireRedASR2ForConditionalGeneration",
        "FunASRForConditionalGeneration", "FunAudioChatForConditionalGeneration",
        "Gemma3ForConditionalGeneration", "Gemma3nForConditionalGeneration", "DiffusionGemmaForBlockDiffusion",
        "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
        "GlmAsrForConditionalGeneration", "GLM4VForCausalLM", "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration", "GlmOcrForConditionalGeneration", "Glm5NextForConditionalGeneration",
        "GraniteSpeechForConditionalGeneration", "GraniteSpeechPlusForConditionalGeneration",
        "Granite4VisionForConditionalGeneration", "H2OVLChatModel", "InternVLChatModel",
        "InternS1ForConditionalGeneration", "InternVLForConditionalGeneration",
        "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration", "Idefics3ForConditionalGeneration",
        "IsaacForConditionalGeneration", "KananaVForConditionalGeneration", "KeyeForConditionalGeneration",
        "KeyeVL1_5ForConditionalGeneration", "KimiVLForConditionalGeneration", "KimiK25ForConditionalGeneration",
        "KimiK3ForConditionalGeneration", "MoonshotKimiaForCausalLM",
        "MossTranscribeDiarizeForConditionalGeneration", "LightOnOCRForConditionalGeneration",
        "Lfm2VlForConditionalGeneration", "Llama4ForConditionalGeneration", "Llama_Nemotron_Nano_VL",
        "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
        "LlavaNextVideoForConditionalGeneration", "LlavaOnevisionForConditionalGeneration",
        "LlavaOnevision2ForConditionalGeneration", "MiDashengLMModel", "MiMoV2OmniForCausalLM",
        "MiniMaxM3SparseForConditionalGeneration", "MiniCPMO", "MiniCPMOcrForConditionalGeneration", "MiniCPMV",
        "MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_7ForConditionalGeneration",
        "Mistral3ForConditionalGeneration", "MolmoForCausalLM", "Molmo2ForConditionalGeneration",
        "Moondream3ForCausalLM", "MossAudioModel", "HfMoondream", "NemotronH_Nano_VL_V2",
        "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Super_Omni_Reasoning_V3", "NemotronH_Omni_Reasoning_V3",
        "NVLM_D", "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration",
        "OpenCUAForConditionalGeneration", "OpenPanguVLForConditionalGeneration", "OpenVLAForActionPrediction",
        "Ovis", "Ovis2_5", "Ovis2_6ForCausalLM", "Ovis2_6_MoeForCausalLM", "PaddleOCRVLForConditionalGeneration",
        "PaliGemmaForConditionalGeneration", "Phi3VForCausalLM", "Phi4ForCausalLMV", "Phi4MMForCausalLM",
        "PixtralForConditionalGeneration", "QianfanOCRForConditionalGeneration",
        "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
        "Qwen2AudioForConditionalGeneration", "Qwen2_5OmniModel", "Qwen2_5OmniForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration", "Qwen3ASRForConditionalGeneration", "Qwen3ASRRealtimeGeneration",
        "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration", "RForConditionalGeneration", "SkyworkR1VChatModel",
        "SmolVLMForConditionalGeneration", "StepVLForConditionalGeneration", "Step3VLForConditionalGeneration",
        "Step3p7ForConditionalGeneration", "Step5ForConditionalGeneration", "UltravoxModel",
        "VoxtralForConditionalGeneration", "VoxtralRealtimeGeneration", "CohereAsrForConditionalGeneration",
        "NemotronParseForConditionalGeneration", "RadioMBartPrefixForCausalLM",
        "WhisperForConditionalGeneration",
    ),
    "speculative decoding": (
        "ExtractHiddenStatesModel", "MiMoMTPModel", "MiMoV2MTPModel", "MiMoV2OmniMTPModel",
        "EagleCohereForCausalLM", "EagleLlamaForCausalLM", "EagleLlama4ForCausalLM", "EagleMiniCPMForCausalLM",
        "DFlashDraftModel", "LiLiCorrDraftModel", "DFlash2DraftModel", "DFlash2BeamDraftModel",
        "MuseGlimmerAssistantModel", "DFlashMuseGlimmerAssistantModel", "DSparkDraftModel",
        "DSparkV41DraftModel", "Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Qwen3XPressModel",
        "DFlashQwen3XPressModel", "K3DSparkModel", "MuseSparkDSparkModel", "DFlashLagunaForCausalLM",
        "Gemma4DSparkModel", "PEagleDraftModel", "PeagleLlamaForCausalLM", "Eagle3LlamaForCausalLM",
        "Eagle3MiniMaxM2ForCausalLM", "LlamaForCausalLMEagle3", "Eagle3Qwen2_5vlForCausalLM",
        "Eagle3Qwen3vlForCausalLM", "Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM",
        "EagleMistralForCausalLM", "EagleMistralLarge3ForCausalLM", "Eagle3DeepseekV2ForCausalLM",
        "Eagle3DeepseekV3ForCausalLM", "EagleDeepSeekMTPModel", "DeepSeekMTPModel", "DeepseekV32MTPModel",
        "Dots3NoteMTPModel", "DeepSeekV4MTPModel", "BailingMoeV3MTPModel", "MiniMaxM3MTP",
        "BailingMoeV25MTPModel", "InklingMTPModel", "Gemma4MTPModel", "ErnieMTPModel", "ExaoneMoeMTP",
        "Exaone4_5_MTP", "NemotronHMTPModel", "LongCatFlashMTPModel", "Glm4MoeMTPModel", "Glm4MoeLiteMTPModel",
        "GlmOcrMTPModel", "Glm5NextMTPModel", "OpenPanguMTPModel", "ParseAuxMTPModel", "Qwen3NextMTP",
        "Step5MTP", "Qwen4ExpMTP", "Step3p5MTP", "Qwen3_5MTP", "Qwen3_5MoeMTP", "InternS2MobiusMTP",
        "HYV3MTPModel", "HYV4MTPModel", "KimiK3MTPModel",
    ),
    "transformers backend": (
        "ArceeForCausalLM", "CwmForCausalLM", "FlexOlmoForCausalLM", "GlmForCausalLM", "GPTBigCodeForCausalLM",
        "GPTNeoXForCausalLM", "HunYuanDenseV1ForCausalLM", "HunYuanMoEV1ForCausalLM", "Jais2ForCausalLM",
        "Kolibri1ForCausalLM", "MellumForCausalLM", "NanbeigeForCausalLM", "OlmoForCausalLM", "Olmo2ForCausalLM",
        "Olmo3ForCausalLM", "PhiForCausalLM", "SeedOssForCausalLM", "SmolLM3ForCausalLM",
        "Starcoder2ForCausalLM", "VaultGemmaForCausalLM", "Emu3ForConditionalGeneration",
        "HunYuanVLForConditionalGeneration", "VibeVoiceAsrForConditionalGeneration", "TransformersForCausalLM",
        "TransformersMoEForCausalLM", "TransformersForMTP", "TransformersMoEForMTP",
        "TransformersMultiModalForCausalLM", "TransformersMultiModalMoEForCausalLM",
        "TransformersEmbeddingModel", "TransformersMoEEmbeddingModel", "TransformersMultiModalEmbeddingModel",
        "TransformersForSequenceClassification", "TransformersMoEForSequenceClassification",
        "TransformersMultiModalForSequenceClassification",
    ),
}

_SPARSE = frozenset((
    "BeamForCausalLM", "DeepseekV41ForCausalLM", "DeepseekV4ForCausalLM", "DeepseekV4ForConditionalGeneration",
    "Dots3NoteForCausalLM", "FlintForCausalLM", "Glm5NextForCausalLM", "Glm5NextForConditionalGeneration",
    "HYV4ForCausalLM", "InklingForCausalLM", "InklingForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration", "MuseSparkForConditionalGeneration",
    "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Step5ForCausalLM",
    "Step5ForConditionalGeneration",
))
_SPARSE_WHY = ("vLLM keeps this model's sparse or compressed attention in caches of its own (an indexer, "
               "compressed KV), which gpulaunch does not model yet")

#: Refused by class, with the reason a user reads.
REFUSED: dict[str, str] = {
    **{name: _SPARSE_WHY for name in _SPARSE},
    "DeepseekV32ForCausalLM": "vLLM keeps DeepSeek-V3.2's sparse-attention indexer in a cache of its own beside "
                              "the MLA latent, which gpulaunch does not model for vLLM yet",
    "GlmMoeDsaForCausalLM": "vLLM keeps GLM-5's sparse-attention indexer in a cache of its own beside the MLA "
                            "latent, which gpulaunch does not model for vLLM yet",
    **{name: "a speculative-decoding draft (--speculative-config), loaded beside its target model, not alone"
       for name in VLLM_REGISTRY["speculative decoding"]},
}


def refusal(cls: str) -> str | None:
    """Why gpulaunch refuses to size a model of class ``cls`` for vLLM (None: it sizes it)."""
    return REFUSED.get(cls)
